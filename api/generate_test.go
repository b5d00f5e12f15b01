// Package api_test checks that the code generated from api/v1beta1 is current.
package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root, relative to this package's directory.
const repoRoot = ".."

// generated lists what hack/generate.sh writes: single files, and directories
// that hold nothing but generated files.
var generated = struct{ files, dirs []string }{
	files: []string{
		"api/v1beta1/zz_generated.deepcopy.go",
		"config/crd/ome.io_trafficmaps.yaml",
		"charts/publisher/templates/trafficmap-crd.yaml",
	},
	dirs: []string{"api/client"},
}

// inputs lists what hack/generate.sh reads besides the pinned generators.
var inputs = []string{"go.mod", "go.sum", "hack/boilerplate.go.txt", "api/v1beta1"}

// TestGeneratedCodeIsCurrent runs hack/generate.sh on a scratch copy of its
// inputs and fails, naming every stale, missing or extra file, when the
// result differs from the committed files. The generators are built from the
// hack/tools module, so the first run on a fresh clone downloads and builds
// them.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	scratch := t.TempDir()
	for _, in := range inputs {
		copyInput(t, filepath.Join(repoRoot, in), filepath.Join(scratch, in))
	}

	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(repoRoot, "hack", "generate.sh"), scratch)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/generate.sh failed:\n%s", out)

	var problems []string
	for _, f := range generated.files {
		problems = append(problems, compareFile(t, f, filepath.Join(repoRoot, f), filepath.Join(scratch, f))...)
	}
	for _, d := range generated.dirs {
		want := listFiles(t, filepath.Join(scratch, d))
		have := listFiles(t, filepath.Join(repoRoot, d))
		for _, rel := range union(want, have) {
			f := filepath.ToSlash(filepath.Join(d, rel))
			problems = append(problems, compareFile(t, f, filepath.Join(repoRoot, f), filepath.Join(scratch, f))...)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("generated code is out of date; run `make generate` and commit the result:\n  %s",
			strings.Join(problems, "\n  "))
	}
}

// copyInput copies a file, or the non-test Go files of a directory, from src to dst.
func copyInput(t *testing.T, src, dst string) {
	t.Helper()
	info, err := os.Stat(src)
	require.NoError(t, err)
	if !info.IsDir() {
		copyFile(t, src, dst)
		return
	}
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		copyFile(t, filepath.Join(src, name), filepath.Join(dst, name))
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, data, 0o644))
}

// compareFile returns a problem for name when the committed file differs
// from the freshly generated one, or exists on one side only.
func compareFile(t *testing.T, name, committed, fresh string) []string {
	t.Helper()
	have, haveErr := os.ReadFile(committed)
	want, wantErr := os.ReadFile(fresh)
	switch {
	case haveErr != nil && wantErr != nil:
		t.Fatalf("reading %s: %v; %v", name, haveErr, wantErr)
	case wantErr != nil:
		return []string{name + ": not produced by hack/generate.sh (delete it)"}
	case haveErr != nil:
		return []string{name + ": missing from the repository"}
	case !bytes.Equal(have, want):
		return []string{fmt.Sprintf("%s: differs from line %d", name, firstDiffLine(have, want))}
	}
	return nil
}

// firstDiffLine returns the 1-based number of the first line where a and b differ.
func firstDiffLine(a, b []byte) int {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(la), len(lb)) {
		if !bytes.Equal(la[i], lb[i]) {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// listFiles returns the files under dir as slash-separated paths relative to
// dir; none when dir does not exist.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return files
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string{}, a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
