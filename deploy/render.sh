#!/bin/sh
# Print a template with each @NAME@ replaced by its value:
#
#     sh deploy/render.sh TEMPLATE NAME=VALUE...
#
# Plain sed, POSIX sh: install.sh renders with it on a host, and the compose file's nginx renders
# the same templates with it inside the official nginx image. A placeholder left without a value
# is an error, so a template and its callers cannot drift apart silently. Values are one line.
set -eu
[ $# -ge 1 ] || { echo "usage: render.sh TEMPLATE NAME=VALUE..." >&2; exit 2; }
template=$1
shift
script=""
for pair in "$@"; do
    name=${pair%%=*}
    value=${pair#*=}
    # In a sed replacement only \, & and the delimiter are special.
    escaped=$(printf '%s' "$value" | sed -e 's/[\\|&]/\\&/g')
    script="${script}s|@${name}@|${escaped}|g
"
done
out=$(sed -e "$script" "$template")
if printf '%s\n' "$out" | grep -n '@[A-Z][A-Z0-9_]*@' >&2; then
    echo "render.sh: $template: the placeholders above have no value" >&2
    exit 1
fi
printf '%s\n' "$out"
