//go:build !linux

package main

import "syscall"

// childSysProcAttr: without Pdeathsig, Cluster API's process still stops
// when its stdin, held by the parent, closes with the parent.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
