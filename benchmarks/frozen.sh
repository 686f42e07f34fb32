#!/usr/bin/env bash
# Runs `python -m dml_jax.bench ARGS...` from a frozen copy of one commit of the repository: the
# files of `git archive COMMIT` (ARCHIVE, a .tar.gz made on the machine that has the history),
# unpacked once into FROZEN_DIR (default /tmp/dml_jax_frozen) and made a git repository of
# their own, so that the harness's `tree` is that commit's tree and the results page names
# that commit (`harness.commit_of_tree`), whatever the working tree beside it holds. A suite
# longer than one sitting can so go on (`--resume`) at one commit across sessions that keep
# changing the package. Give `--out` an absolute path outside FROZEN_DIR.
#
#   git archive --format=tar.gz -o bench_out/frozen.tgz COMMIT      # bench_out/: git ignores it
#   benchmarks/frozen.sh bench_out/frozen.tgz --out "$PWD/bench_out" --suite decode --resume
#
# docs/benchmarks.md, "Frozen runs".
set -euo pipefail
archive=$(realpath "$1")
shift
dir=${FROZEN_DIR:-/tmp/dml_jax_frozen}
sum=$(sha256sum < "$archive" | cut -d' ' -f1)
if [ "$(cat "$dir/.git/frozen_from" 2>/dev/null)" != "$sum" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  tar xzf "$archive" -C "$dir"
  (cd "$dir" && git init -q && git add -A &&
    git -c user.name=frozen -c user.email=frozen@localhost commit -qm "frozen: $sum")
  echo "$sum" > "$dir/.git/frozen_from"  # inside .git: not one of the tree's files
fi
cd "$dir"
PYTHONPATH="$dir" exec "${PYTHON:-python3}" -m dml_jax.bench "$@"
