package main

import (
	"archive/tar"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The image built from the real publisher binary runs it as a non-root user, as its
// entrypoint, with no other file (no shell).
func TestImageTarball(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "publisher")
	// hack/image is its own module: build the publisher in the repository's root module.
	build := exec.Command("go", "-C", filepath.Join("..", ".."), "build", "-trimpath", "-o", bin, "./cmd/publisher")
	build.Env = append(build.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	tarPath := filepath.Join(dir, "image.tar")
	require.NoError(t, run(bin, tarPath, "trafficmap-publisher:test"))
	img, err := tarball.ImageFromPath(tarPath, nil)
	require.NoError(t, err)

	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/publisher"}, cfg.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cfg.Config.User, "non-root")
	assert.Empty(t, cfg.Config.Cmd)
	assert.Equal(t, "linux", cfg.OS)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	var files []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		files = append(files, h.Name)
		assert.Equal(t, 65532, h.Uid)
	}
	assert.Equal(t, []string{"publisher"}, files, "the binary is the only file: no shell, nothing else to run")

	again, err := Build(bin)
	require.NoError(t, err)
	d1, err := img.Digest()
	require.NoError(t, err)
	d2, err := again.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2, "the same binary gives the same image")
}
