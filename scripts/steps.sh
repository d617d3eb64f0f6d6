# shellcheck shell=bash
# scripts/test's step runner (sourced): independent steps side by side, each one's exit status checked.
#
#   start NAME COMMAND...       COMMAND in the background; its output is kept and printed whole, in order, at the
#                               next finish (short steps whose interleaved lines would only confuse)
#   start_live TAG COMMAND...   COMMAND in the background; its lines are printed as they come, each prefixed with
#                               [TAG] unless it starts with a [tag] of its own (long steps: the cold Go builds), and
#                               kept, to be printed whole again if the step fails
#   finish                      waits for every step started since the last finish, says how each ended and how
#                               long it took; exits 1 if any failed
#
# The caller sets STEP_LOGS to a directory for the steps' output (and removes it).

steps=() pids=() lives=() begun=()

start() {
  local name=$1; shift
  "$@" > "$STEP_LOGS/$name" 2>&1 &
  steps+=("$name") pids+=($!) lives+=(0) begun+=("$SECONDS")
}

# prefix_lines TAG: stdin to stdout line by line, as each line comes, tagged unless it has a tag. (Bash's read, not
# awk: mawk reads a pipe in blocks and would hold the lines back; the builds print a few dozen lines.)
prefix_lines() {
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    [[ "$line" == "["* ]] || line="[$1] $line"
    printf '%s\n' "$line"
  done
}

start_live() {
  local tag=$1; shift
  # The subshell's status is COMMAND's, not the pipe's last command's.
  ( "$@" 2>&1 | tee "$STEP_LOGS/$tag" | prefix_lines "$tag"; exit "${PIPESTATUS[0]}" ) &
  steps+=("$tag") pids+=($!) lives+=(1) begun+=("$SECONDS")
}

finish() {
  local failed=() i status
  for i in "${!pids[@]}"; do
    status=0
    wait "${pids[$i]}" || status=$?
    if [ "${lives[$i]}" = 1 ]; then
      echo "== ${steps[$i]}: $([ "$status" = 0 ] && echo done || echo "FAILED (exit $status)") after $((SECONDS - begun[i])) s"
      if [ "$status" != 0 ]; then
        echo "== ${steps[$i]}: its whole output again"
        cat "$STEP_LOGS/${steps[$i]}"
      fi
    else
      echo "== ${steps[$i]}"
      cat "$STEP_LOGS/${steps[$i]}"
    fi
    [ "$status" = 0 ] || failed+=("${steps[$i]}")
  done
  steps=() pids=() lives=() begun=()
  if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    exit 1
  fi
}
