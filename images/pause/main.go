// Command pause is the pod sandbox's process in CAPCT's node image: it holds
// the pod's namespaces open and does nothing else. As PID 1 of a pod that
// shares its PID namespace it reaps orphaned children, and it exits at once on
// SIGINT or SIGTERM (a PID 1 gets no default signal handling from the kernel).
//
// It is built static (CGO_ENABLED=0) and shipped FROM scratch as
// registry.k8s.io/pause:<version>, so nothing has to be pulled.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (capct)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
			os.Exit(0)
		}
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
