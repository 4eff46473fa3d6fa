"""Planning: open through storage, hand plain facts to axon.http, return a Response."""
