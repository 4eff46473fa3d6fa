"""Pure logic, no sockets: segments, multipart framing, ranges, conditional requests, batch plans."""
