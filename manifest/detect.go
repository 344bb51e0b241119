package manifest

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Environment is what Detect learned about the substrate.
type Environment struct {
	// Container is true inside Docker, Podman, containerd or Kubernetes.
	Container bool
	// Runtime names the container runtime or orchestrator found
	// ("kubernetes", "docker", "podman", "containerd"), or "".
	Runtime string
	// CPUQuota is the cgroup CPU limit in cores, 0 when none is set.
	CPUQuota float64
}

// Detect inspects the running process's environment: marker files,
// /proc/1/cgroup and the cgroup CPU controller. It never fails: what it
// cannot read it leaves unset.
func Detect() Environment {
	return DetectFrom(os.DirFS("/"), os.Getenv)
}

// DetectFrom is Detect over an explicit root file system (paths without
// the leading slash, as io/fs requires) and environment lookup; tests use
// it with fstest.MapFS.
func DetectFrom(root fs.FS, getenv func(string) string) Environment {
	var env Environment
	switch {
	case getenv("KUBERNETES_SERVICE_HOST") != "":
		env.Runtime = "kubernetes"
	case exists(root, ".dockerenv"):
		env.Runtime = "docker"
	case exists(root, "run/.containerenv"):
		env.Runtime = "podman"
	default:
		env.Runtime = runtimeFromCgroup(root)
	}
	env.Container = env.Runtime != ""
	env.CPUQuota = cpuQuota(root)
	return env
}

func exists(root fs.FS, name string) bool {
	_, err := fs.Stat(root, name)
	return err == nil
}

// runtimeFromCgroup recognises the cgroup paths container runtimes give
// PID 1 (cgroup v1, and v2 hosts without a private cgroup namespace).
func runtimeFromCgroup(root fs.FS) string {
	b, err := fs.ReadFile(root, "proc/1/cgroup")
	if err != nil {
		return ""
	}
	s := string(b)
	switch {
	case strings.Contains(s, "kubepods"):
		return "kubernetes"
	case strings.Contains(s, "docker"):
		return "docker"
	case strings.Contains(s, "libpod"):
		return "podman"
	case strings.Contains(s, "containerd"):
		return "containerd"
	}
	return ""
}

// cpuQuota reads cgroup v2 cpu.max ("max 100000" or "QUOTA PERIOD"),
// falling back to cgroup v1's cfs_quota_us / cfs_period_us.
func cpuQuota(root fs.FS) float64 {
	if b, err := fs.ReadFile(root, "sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			return ratio(f[0], f[1])
		}
		return 0
	}
	q, err1 := fs.ReadFile(root, "sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	p, err2 := fs.ReadFile(root, "sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if err1 != nil || err2 != nil {
		return 0
	}
	return ratio(firstLine(q), firstLine(p))
}

func firstLine(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	if sc.Scan() {
		return strings.TrimSpace(sc.Text())
	}
	return ""
}

func ratio(quota, period string) float64 {
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return q / p
}
