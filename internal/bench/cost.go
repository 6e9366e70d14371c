package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/lab"
)

// What a transfer costs: CPU seconds per gigabyte moved, for the whole
// machine (every CPU's busy time in /proc/stat: what the transfer costs in
// all, kernel included, and whatever else ran meanwhile) and for the
// path's userspace WireGuard processes (their own user and system time),
// and the peak memory of those processes.

// clockTicks is USER_HZ, the unit of /proc/stat and /proc/PID/stat times
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// cpuSample is a reading of CPU time in seconds.
type cpuSample struct {
	machine float64 // busy time of all CPUs
	procs   float64 // user+system time of the path's processes
}

// costMeter reads the CPU time of the machine and of a path's processes.
type costMeter struct {
	// pids returns the path's userspace WireGuard processes; nil: none.
	pids func() []int
}

func (c costMeter) sample() (cpuSample, error) {
	var s cpuSample
	m, err := machineBusy()
	if err != nil {
		return s, err
	}
	s.machine = m
	if c.pids != nil {
		for _, pid := range c.pids() {
			t, err := processCPU(pid)
			if err != nil {
				return s, err
			}
			s.procs += t
		}
	}
	return s, nil
}

// perGB returns the CPU seconds per gigabyte of bytes moved between two
// samples: the machine's, and the processes' (0 without processes).
func (c costMeter) perGB(before, after cpuSample, bytes int64) (machine, procs float64) {
	if bytes <= 0 {
		return 0, 0
	}
	gb := float64(bytes) / 1e9
	machine = round((after.machine-before.machine)/gb, 3)
	if c.pids != nil {
		procs = round((after.procs-before.procs)/gb, 3)
	}
	return machine, procs
}

// machineBusy returns the busy time of all CPUs since boot: user, nice,
// system, irq, softirq and steal time from /proc/stat.
func machineBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("reading CPU time: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("reading CPU time: unexpected /proc/stat line %q", line)
	}
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0, fmt.Errorf("reading CPU time: %w", err)
		}
		ticks += v
	}
	return ticks / clockTicks, nil
}

// processCPU returns the user and system time of process pid.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	// pid (comm) state ppid ...: fields after comm, which may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading the CPU time of process %d: unexpected stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after comm.
	if len(f) < 13 {
		return 0, fmt.Errorf("reading the CPU time of process %d: unexpected stat", pid)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: unexpected stat", pid)
	}
	return (u + s) / clockTicks, nil
}

// peakRSS returns the peak resident memory (VmHWM) of process pid in
// bytes.
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading the memory of process %d: %q", pid, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("reading the memory of process %d: no VmHWM", pid)
}

// memoryOf returns a path's memory figure: the largest peak of its
// processes.
func memoryOf(name string, pids []int) (MemoryResult, error) {
	m := MemoryResult{Path: name, Processes: len(pids)}
	for _, pid := range pids {
		b, err := peakRSS(pid)
		if err != nil {
			return m, err
		}
		m.PeakRSSMiB = max(m.PeakRSSMiB, round(float64(b)/(1<<20), 1))
	}
	return m, nil
}

// socketOwner returns the process listening on the unix socket at path
// (a userspace WireGuard device's UAPI socket), by its peer credentials.
func socketOwner(path string) (int, error) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var pid int
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			cerr = err
			return
		}
		pid = int(cred.Pid)
	}); err != nil {
		return 0, err
	}
	return pid, cerr
}

// wgdevPIDs returns a function that finds the userspace WireGuard
// processes of interface iface on the gateways (through their UAPI
// sockets). A gateway without one (kernel WireGuard) is left out.
func wgdevPIDs(iface string, gws ...*lab.Node) func() []int {
	var pids []int
	for _, gw := range gws {
		if pid, err := socketOwner(filepath.Join(gw.WireGuardDir(), iface+".sock")); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	return func() []int { return pids }
}
