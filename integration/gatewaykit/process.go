package gatewaykit

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Process is a gateway binary running with its output in a log file.
type Process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// StartProcess starts cmd with its standard output and error in the file logPath.
func StartProcess(cmd *exec.Cmd, logPath string) (*Process, error) {
	p := &Process{cmd: cmd, log: logPath, done: make(chan struct{})}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process (SIGINT, then SIGKILL after 10 s) and waits until it has exited.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// LogPath is the file holding the process's output.
func (p *Process) LogPath() string { return p.log }

// Tail returns the last n lines of the process's output.
func (p *Process) Tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
