//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// stopOnProfileSignal calls stop when the process is sent SIGUSR1, once.
func stopOnProfileSignal(stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		<-ch
		signal.Stop(ch)
		stop()
	}()
}
