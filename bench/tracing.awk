# Reads the output of BenchmarkTracing from the build without tracing code
# and the default build, run one after the other in rounds (make
# bench-tracing), and prints each case with its ratio to the compiled-out
# case of the same round and path.
#
#   BenchmarkTracing/ask/compiled-out-2  3000  98765 ns/op  2143 B/op  32 allocs/op
/^BenchmarkTracing\// {
	split($1, p, "/")
	path = p[2]
	mode = p[3]
	sub(/-[0-9]+$/, "", mode)
	ns = allocs = ""
	for (i = 3; i < NF; i++) {
		if ($(i + 1) == "ns/op") ns = $i
		if ($(i + 1) == "allocs/op") allocs = $i
	}
	if (mode == "compiled-out") {
		if (path == "ask") round++
		base[path] = ns
	}
	ratio = (base[path] > 0) ? sprintf("%.2f", ns / base[path]) : "-"
	printf "round %d  %-4s %-12s %10.0f ns/op  %4s allocs/op  x-compiled-out %s\n", round, path, mode, ns, allocs, ratio
}
