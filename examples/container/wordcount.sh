#!/bin/sh
# wordcount says how many words its arguments hold, from inside the
# container: its root is the image's, read-only; /work is the attempt's.
set -eu
n=$(echo "$@" | wc -w)
echo "$GREETING: $n words" | tee /work/count.txt
