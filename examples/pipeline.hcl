# A pipeline whose stages pass data: generate writes the numbers 1..100,
# two square stages each square half of them (odd, even), and sum adds
# every square up: 338350, left in total.txt and printed.
#
#   herd job run examples/pipeline.hcl -wait
name = "sum-of-squares"

stage "generate" {
  outputs = ["numbers.txt"]
  task {
    command = ["sh", "-c", "i=1; while [ $i -le 100 ]; do echo $i; i=$((i+1)); done > numbers.txt"]
  }
}

stage "square" {
  depends_on = ["generate"]
  for_each   = ["1", "0"]   # odd numbers, then even ones: HERD_ITEM is the remainder
  inputs     = ["generate.numbers.txt"]
  outputs    = ["squares.txt"]
  task {
    command = ["sh", "-c", "while read n; do [ $((n % 2)) -eq $HERD_ITEM ] && echo $((n * n)); done < $HERD_INPUTS/generate/numbers.txt > squares.txt; true"]
  }
}

stage "sum" {
  depends_on = ["square"]
  inputs     = ["square.squares.txt"]
  outputs    = ["total.txt"]
  task {
    command = ["sh", "-c", "t=0; for f in $HERD_INPUTS/square/*/squares.txt; do while read s; do t=$((t + s)); done < $f; done; echo $t | tee total.txt"]
  }
}
