"""The persistent machine protocol: one init per sandbox, one agent shell, one verifier runner.

Layout (all fixed host text; the command only ever arrives as data on a channel):

* ``INIT`` runs as the sandbox's first process. It reads a per-sandbox random nonce from
  its stdin (never from argv or env, so ``/proc/<pid>/cmdline`` does not show it), starts
  the verifier runner on fds 3/4/5 when present, then runs the agent shell in a loop:
  when the agent shell dies (``exit``, ``kill -9 $$``, ``set -e``), INIT writes a ``D``
  record and starts a fresh one on the same pipes. The machine (its files, /tmp, its
  background processes, its pid namespace on bwrap) outlives any one shell.
* ``DRIVER`` is the agent's shell: commands are framed on its stdin
  (``<seq> <cmd bytes> <stdin bytes> <cwd bytes>\\n`` then the bytes), evaluated in the
  shell itself (so ``cd``/``export``/functions persist without any re-exec or state
  file), stdout+stderr to the output pipe, then a trailer on the status pipe.
* ``VERIFIER`` runs each command in a fork of a shell started before the first agent
  command, in the agent's last cwd but with none of its shell state: the reward code
  (ToolContext) is not at the mercy of functions, aliases, traps, PATH or exports the
  model left in its shell, nor of a replaced ``bash`` binary (the fork never execs one).

Why the trailer cannot be forged by output: it travels on its own pipe (the shell's
fd 2), which every command runs without (``2>&1`` on the eval: bash keeps the original
in a close-on-exec fd, so no process the command starts inherits it), and the host
accepts only a record carrying this sandbox's nonce and the sequence number of the
command in flight; anything printed on stdout/stderr is output, never protocol. A
command running *inside* the agent shell (builtins, same process) can always reach
that shell's own state, so it can end its own call early or lie about its own exit
code -- which it controls anyway; the host treats the trailer's cwd as untrusted text
(bounded, validated) and the verifier runner is a separate process the agent shell
cannot redefine.
"""

from __future__ import annotations

# Frame reading shared by the agent shell and the verifier runner. Builtins only and byte
# counts (LC_ALL=C): a broken PATH cannot wedge the protocol.
_READ_FRAME = r"""
  __h_c= __h_w=
  [ "$__h_lw" -gt 0 ] 2>/dev/null && { LC_ALL=C IFS= read -r -d '' -N "$__h_lw" __h_w || break; }
  [ "$__h_lc" -gt 0 ] 2>/dev/null && { LC_ALL=C IFS= read -r -d '' -N "$__h_lc" __h_c || break; }
"""

# Abort on timeout without killing the shell: the host sends SIGUSR1 to the shell and kills
# the command's processes; the USR1 trap sets a flag and the DEBUG trap (extdebug: a non-zero
# return skips the command) skips what is left of the command, so `sleep 60; echo survived`
# stops after the sleep. A model that removes these traps only loses this nicety: the host
# then kills the shell and INIT starts a fresh one.
DRIVER = (
    r"""__h_n=$1; set --
__h_sync=${HERMES_OUTPUT_SYNC-}; unset HERMES_OUTPUT_SYNC
shopt -s extdebug; set -o functrace
__h_abort= __h_ineval=
__h_post() {
  __h_ineval= __h_abort=
  [ -z "$__h_sync" ] || printf '\0HS %s %s\0' "$__h_n" "$__h_seq" >&7
  printf 'T %s %s %s %s\n' "$__h_n" "$__h_seq" "$1" "${PWD//$'\n'/}" >&2
}
trap '__h_abort=1' USR1
trap '[ -z "$__h_abort" ] || [ -z "$__h_ineval" ] || [ "${FUNCNAME[0]}" = __h_post ] || [[ $BASH_COMMAND == "__h_post "* ]]' DEBUG
printf 'R %s %s %s\n' "$__h_n" "$$" "$PPID" >&2
while IFS=' ' read -r __h_seq __h_lc __h_li __h_lw; do
  __h_abort="""
    + _READ_FRAME
    + r"""
  [ -n "$__h_w" ] && { cd -- "$__h_w" 2>/dev/null || cd -- "$HOME" 2>/dev/null; }
  __h_ineval=1
  if [ "$__h_li" -gt 0 ] 2>/dev/null; then
    eval "$__h_c" < <(head -c "$__h_li") >&7 7>&- 2>&1
  else
    eval "$__h_c" </dev/null >&7 7>&- 2>&1
  fi
  __h_post "$?"
done
exit 199
"""
)

VERIFIER = (
    r"""IFS= read -r __h_n || exit 125
__h_sync=${HERMES_OUTPUT_SYNC-}; unset HERMES_OUTPUT_SYNC
printf 'R %s %s\n' "$__h_n" "$$" >&2
while IFS=' ' read -r __h_seq __h_lc __h_li __h_lw; do"""
    + _READ_FRAME
    + r"""
  (
    cd -- "${__h_w:-$HOME}" 2>/dev/null || cd -- "$HOME" 2>/dev/null
    if [ "$__h_li" -gt 0 ] 2>/dev/null; then
      eval "unset __h_n; $__h_c" < <(head -c "$__h_li") 2>&1
    else
      eval "unset __h_n; $__h_c" </dev/null 2>&1
    fi
  )
  __h_rc=$?
  [ -z "$__h_sync" ] || printf '\0HS %s %s\0' "$__h_n" "$__h_seq"
  printf 'T %s %s %s %s\n' "$__h_n" "$__h_seq" "$__h_rc" "${__h_w//$'\n'/}" >&2
done
exit 199
"""
)

# $1 = DRIVER text, $2 = VERIFIER text, $3 $4 $5 = the verifier's in/out/status fds (when
# the verifier lives in this machine). fd 7 = a second handle on the output pipe, so a
# command's `exec >/dev/null` cannot silence every later command (the eval restores it).
INIT = r"""IFS= read -r __h_n || exit 125
if [ -n "$5" ]; then
  eval 'bash --noprofile --norc -c "$2" hermes-verify <&'"$3"' >&'"$4"' 2>&'"$5"' '"$3"'<&- '"$4"'>&- '"$5"'>&- &'
  eval 'exec '"$3"'<&- '"$4"'>&- '"$5"'>&-'
fi
__h_k=0
while [ "$__h_k" -lt 10000 ]; do  # bounded: a shell that cannot start must not spin forever
  bash --noprofile --norc -c "$1" bash "$__h_n" 7>&1
  __h_rc=$?
  [ "$__h_rc" = 199 ] && exit 0
  printf 'D %s %s\n' "$__h_n" "$__h_rc" >&2
  __h_k=$((__h_k + 1))
done
exit 1
"""
