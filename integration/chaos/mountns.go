package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
)

// A replica with replicaOptions.ResolvConf runs in a mount namespace of its own whose
// /etc/resolv.conf is that file (a bind mount), so that its resolver asks the harness's DNS
// server (dnsserver.go) on port 53 of an address only the harness uses, and nothing else on
// the machine sees the change. The harness binary is the wrapper: started in a new mount
// namespace (SysProcAttr.Unshareflags, which also makes "/" private there), it mounts the
// file and execs the publisher in place, so the replica keeps the wrapper's pid, process
// group and parent-death signal.
const (
	// resolvConfEnv, set only on the re-executed harness, names the file to mount.
	resolvConfEnv = "TRAFFICMAP_CHAOS_RESOLV_CONF"
	// replicaBinEnv, set with resolvConfEnv, is the binary to exec with the same arguments.
	replicaBinEnv = "TRAFFICMAP_CHAOS_REPLICA_BIN"
	// systemResolvConf is the file the mount covers.
	systemResolvConf = "/etc/resolv.conf"
)

// execWithResolvConfIfAsked turns a harness binary that resolvConfCommand started into the
// replica (it never returns then; on an error it exits 1); otherwise it returns at once.
// Call it first in main.
func execWithResolvConfIfAsked() {
	path := os.Getenv(resolvConfEnv)
	if path == "" {
		return
	}
	if err := execWithResolvConf(path, os.Getenv(replicaBinEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "chaos replica wrapper:", err)
		os.Exit(1)
	}
}

// execWithResolvConf mounts path over /etc/resolv.conf and execs bin with this process's
// arguments and its environment without the wrapper's variables. It returns only on an
// error.
func execWithResolvConf(path, bin string) error {
	if bin == "" {
		return fmt.Errorf("%s is not set", replicaBinEnv)
	}
	if err := syscall.Mount(path, systemResolvConf, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mount %s over %s: %w", path, systemResolvConf, err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, resolvConfEnv+"=") || strings.HasPrefix(kv, replicaBinEnv+"=")
	})
	if err := syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), env); err != nil {
		return fmt.Errorf("exec %s: %w", bin, err)
	}
	return nil
}

// resolvConfCommand is the command that runs bin with args (and env added to the
// harness's environment) in a new mount namespace whose /etc/resolv.conf is resolvConf: the
// harness binary re-executed (execWithResolvConfIfAsked). The caller adds its own
// SysProcAttr fields to the one set here.
func resolvConfCommand(bin, resolvConf string, args, env []string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the harness binary: %w", err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(append(os.Environ(), env...), resolvConfEnv+"="+resolvConf, replicaBinEnv+"="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return cmd, nil
}
