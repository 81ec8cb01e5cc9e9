"""The persistent machine protocol: one init per sandbox, one agent shell, one verifier runner.

Layout (all fixed host text; the command only ever arrives as data on a channel):

* ``INIT`` runs as the sandbox's first process. It reads a per-sandbox random nonce from
  its stdin (never from argv or env, so ``/proc/<pid>/cmdline`` does not show it), starts
  the verifier runner on the fds its arguments 4-6 name (when present), then runs the agent shell in a loop
  (handing it the nonce on fd 6, a here-string: not in its argv either).
* A command that ends the agent shell (``exit 3``, a ``set -e`` failure, ``exec``,
  ``kill $$``) ends with that status, as under ``bash -c``, and the sandbox survives: the
  dying shell's EXIT trap saves its exports and cwd to the state file, INIT writes a ``D``
  record and starts a fresh shell on the same pipes, which takes the saved state over
  (then wipes it) and drops whatever is left of the frame the old one was reading (the
  host sends nothing until the new shell's ``R``), so no command runs late or twice. A
  shell the command left unable to run commands (``ulimit -n 3`` closed its spare fd; a
  frame variable made ``readonly``) hands over the same way (exit 196-198). Only
  SIGKILL or ``exec`` lose the exports (no EXIT trap): the host then restores the last
  reported cwd. The machine (its files, /tmp, its background processes, its pid
  namespace on bwrap) outlives any one shell.
* ``DRIVER`` is the agent's shell: commands are framed on its stdin
  (``\\nF<nonce> <seq> <cmd bytes> <stdin bytes> <cwd bytes>\\n`` then the bytes; a shell
  that takes over after one died mid-frame skips to the next line carrying the tag), evaluated in the
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
code and cwd -- which it controls anyway (``cd /x; exit 3``); the host treats the
trailer's cwd as untrusted text (bounded, validated) and the verifier runner is a
separate process with its own nonce that the agent shell cannot redefine. A command
that redefines the shell's own helpers (``printf() { :; }``) only wedges its own
shell: the next command times out and the shell is replaced.
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
    r"""IFS= read -r __h_n <&6; exec 6<&-  # the nonce: from INIT on fd 6, never in argv/env (/proc shows those)
# read before any saved state is restored, so a command cannot turn the output marker off
__h_sync=${HERMES_OUTPUT_SYNC-}; unset HERMES_OUTPUT_SYNC
__h_st=$1 __h_restored=
# A fresh shell after one ended (exit, set -e, kill $$): take over the state it saved on its
# way out (exported variables, cwd), then wipe the file so a stale one is never read twice.
if [[ $2 != 0 && -n $__h_st && -s $__h_st ]]; then
  . "$__h_st" >/dev/null 2>&1 </dev/null && __h_restored=1
  : >"$__h_st" 2>/dev/null
  __h_k=$__h_n; __h_n= __h_st=$1 2>/dev/null; __h_n=$__h_k; [[ $__h_n == "$__h_k" && -n $__h_n ]] || builtin exit 197  # a readonly __h_n came back: start clean
fi
# What is in the frame pipe now is the rest of the frame the dead shell was running (the host
# waits for this shell's R record before it sends another): drop it, never run it late.
if [[ $2 != 0 ]]; then
  while IFS= read -r -d '' -N 65536 -t 0.05 __h_c || [[ -n $__h_c ]]; do __h_c=; done
fi
set --
shopt -s extdebug; set -o functrace
__h_abort= __h_ineval=
__h_post() {
  __h_ineval= __h_abort=
  [ -z "$__h_sync" ] || builtin printf '\0HS %s %s\0' "$__h_n" "$__h_seq" >&7
  builtin printf 'T %s %s %s %s\n' "$__h_n" "$__h_seq" "$1" "${PWD//$'\n'/}" >&2
}
__h_save() { [[ -n $__h_st && ! -L $__h_st ]] && { builtin export -p; builtin printf 'builtin cd -- %q\n' "$PWD"; } >"$__h_st" 2>/dev/null; }
trap '__h_save' EXIT
trap '__h_abort=1' USR1
trap '[ -z "$__h_abort" ] || [ -z "$__h_ineval" ] || [ "${FUNCNAME[0]}" = __h_post ] || [[ $BASH_COMMAND == "__h_post "* ]]' DEBUG
printf 'R %s %s %s\n' "$__h_n" "$$" "$PPID" >&2
while IFS=' ' read -r __h_tag __h_seq __h_lc __h_li __h_lw; do
  [[ $__h_tag == "F$__h_n" ]] || continue  # resync: rest of a frame a dead shell left half read
  __h_abort="""
    + _READ_FRAME
    + r"""
  [ -n "$__h_w" ] && [ -z "$__h_restored" ] && { cd -- "$__h_w" 2>/dev/null || cd -- "$HOME" 2>/dev/null; }
  __h_restored= __h_ineval=1
  if [ "$__h_li" -gt 0 ] 2>/dev/null; then
    eval "$__h_c" < <(head -c "$__h_li") >&7 7>&- 2>&1
  else
    eval "$__h_c" </dev/null >&7 7>&- 2>&1
  fi
  __h_post "$?"
  # the command lowered this shell's fd limit (`ulimit -n 3`) or closed its spare output fd:
  # it can no longer run commands. A fresh shell (INIT's limits) takes over.
  { : >&7; } 2>/dev/null || builtin exit 198
done
# EOF on the frame pipe (the host is done), or the command made a frame variable readonly
# (`readonly __h_seq`): then a fresh shell takes over instead of ending the machine.
( __h_tag= && __h_seq= && __h_lc= && __h_li= && __h_lw= && __h_c= && __h_w= && IFS=' ' ) 2>/dev/null || builtin exit 196
builtin exit 199
"""
)

# $BASHPID, not $$: on local/bwrap the runner is a fork of INIT (a subshell, whose $$ is INIT's).
VERIFIER = (
    r"""IFS= read -r __h_n || exit 125
__h_sync=${HERMES_OUTPUT_SYNC-}; unset HERMES_OUTPUT_SYNC
printf 'R %s %s\n' "$__h_n" "$BASHPID" >&2
while IFS=' ' read -r __h_tag __h_seq __h_lc __h_li __h_lw; do
  [[ $__h_tag == "F$__h_n" ]] || continue"""
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

# $1 = DRIVER text, $2 = VERIFIER text, $3 = the file a dying agent shell saves its state to
# (exports, cwd) for the next one, $4 $5 $6 = the verifier's in/out/status fds (when
# the verifier lives in this machine). fd 7 = a second handle on the output pipe, so a
# command's `exec >/dev/null` cannot silence every later command (the eval restores it).
# The verifier runner is a fork of INIT, started before anything of the model's runs: no
# bash to exec and initialise per sandbox (~2 ms of CPU). It keeps nothing of INIT's: the
# positional parameters go, and its script travels in __h_n, which its first line replaces
# with its own nonce (so INIT's nonce goes too).
INIT = r"""IFS= read -r __h_n || exit 125
__h_sync=${HERMES_OUTPUT_SYNC-}
if [ -n "$6" ]; then
  eval '( __h_n=$2; set --; eval "$__h_n" ) <&'"$4"' >&'"$5"' 2>&'"$6"' '"$4"'<&- '"$5"'>&- '"$6"'>&- &'
  eval 'exec '"$4"'<&- '"$5"'>&- '"$6"'>&-'
fi
# The status pipe carries records only: bash's own note on a shell killed by a signal
# ("bash: 12 Killed ...") goes to /dev/null, or the host would wake on it before the D record.
exec 8>&2 2>/dev/null
__h_k=0
while [ "$__h_k" -lt 10000 ]; do  # bounded: a shell that cannot start must not spin forever
  bash --noprofile --norc -c "$1" bash "$3" "$__h_k" 7>&1 6<<<"$__h_n" 2>&8 8>&-
  __h_rc=$?
  [ "$__h_rc" = 199 ] && exit 0
  # docker relays stdout and stderr apart: end the dead shell's output with a token, so the
  # host reading the D record knows when the last of that output has arrived (both carry
  # the shell's number: a token read before its record is not waited for again)
  [ -z "$__h_sync" ] || printf '\0HS %s D%s\0' "$__h_n" "$__h_k"
  printf 'D %s %s %s\n' "$__h_n" "$__h_rc" "$__h_k" >&8
  __h_k=$((__h_k + 1))
done
exit 1
"""
