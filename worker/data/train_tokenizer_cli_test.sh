#!/usr/bin/env bash
# Runs dhp-train-tokenizer as a user would, with a --corpus file of paragraphs: the file's
# newlines must reach the trainer, so that "\n\n" and ".\n\n" are learned as tokens, and
# dhp-tokenize must then encode "a.\n\nb" as three tokens.
set -euo pipefail
train="$1"
tokenize="$2"
out="${TEST_TMPDIR:-/tmp}/train_tokenizer_cli_test"
rm -rf "$out"
mkdir -p "$out"

for i in $(seq 500); do
  printf 'A short paragraph.\n\nAnother one follows.\n\n'
done > "$out/corpus.txt"
"$train" --out "$out/tok.json" --vocab-size 1100 --corpus "$out/corpus.txt" | grep -q "wrote"
grep -q '"ĊĊ"' "$out/tok.json" || { echo "no \\n\\n token"; exit 1; }
grep -q '"\.ĊĊ"' "$out/tok.json" || { echo "no .\\n\\n token"; exit 1; }

printf '"a.\\n\\nb"\n' | "$tokenize" --tokenizer "$out/tok.json" > "$out/ids.jsonl"
grep -qF '"decoded":"a.\n\nb"' "$out/ids.jsonl" || { cat "$out/ids.jsonl"; exit 1; }
grep -qE '"ids":\[[0-9]+,[0-9]+,[0-9]+\]' "$out/ids.jsonl" || { cat "$out/ids.jsonl"; exit 1; }

if "$train" --out "$out/x.json" --corpus "$out/missing.txt" 2> "$out/err"; then
  echo "a missing corpus file was accepted"
  exit 1
fi
grep -q "usage:" "$out/err"
echo PASS
