# quiet.sh, sourced by run.sh and pairs.sh: wait for a quiet machine
# before each measured run.
#
# quiet waits until the 1-minute load average is below TERASORT_MAXLOAD
# (default 1.5), for at most TERASORT_QUIETWAIT seconds (default 300), and
# sets $load to what it was when the wait ended. A run that starts above
# the bound is marked LOADED in its line: it is not a figure, rerun it.
quiet() {
	local limit=${TERASORT_MAXLOAD:-1.5} wait=${TERASORT_QUIETWAIT:-300} t=0
	load=$(cut -d' ' -f1 /proc/loadavg)
	while awk -v l="$load" -v m="$limit" 'BEGIN{exit !(l >= m)}' && ((t < wait)); do
		sleep 5
		t=$((t + 5))
		load=$(cut -d' ' -f1 /proc/loadavg)
	done
	loaded=""
	if awk -v l="$load" -v m="$limit" 'BEGIN{exit !(l >= m)}'; then
		loaded=" LOADED (above $limit: not a figure)"
	fi
}
