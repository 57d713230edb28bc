//go:build unix

// Package cputime reads the CPU time (user and system) a process has used,
// and that of its children it has waited for: what the benchmarks divide
// by the work done to say what each task cost.
package cputime

import (
	"syscall"
	"time"
)

// Self is the CPU time this process has used so far; zero when the
// kernel does not answer.
func Self() time.Duration { return usage(syscall.RUSAGE_SELF) }

// Children is the CPU time of this process's children that were waited
// for (the tasks it ran and reaped); zero when the kernel does not answer.
func Children() time.Duration { return usage(syscall.RUSAGE_CHILDREN) }

func usage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
