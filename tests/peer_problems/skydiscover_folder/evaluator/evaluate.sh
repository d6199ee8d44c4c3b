#!/bin/sh
# SkyDiscover's evaluator protocol: evaluate.sh <program path> <mode>, mode train or test;
# one JSON object on stdout; exit 1 only when the evaluator itself fails.
set -eu
exec python /benchmark/evaluator.py "$1" "${2:-train}"
