package main

import "syscall"

// childSysProcAttr has the kernel kill Cluster API's process when the
// parent dies without stopping it (a crash, SIGKILL). Pdeathsig follows
// the thread that started the child; Go parks idle threads rather than
// ending them, and nothing in this program locks one, so that thread lives
// as long as the process.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
