//go:build linux

package main

import "syscall"

// childAttr makes the kernel kill a child when the test process dies, so a
// crashed or interrupted test leaves no server running.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
