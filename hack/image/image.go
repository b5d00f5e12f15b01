// Command image builds the publisher's OCI image without a container engine: the static
// binary is the only file, on an empty base, run as a non-root user with the binary as
// entrypoint, written as a tarball that `docker load`, `podman load` or `crane push` take.
//
// It is its own module (hack/image/go.mod), so the publisher's go.mod never depends on
// go-containerregistry; run it from the repository's root with
//
//	go -C hack/image run . --binary "$PWD/bin/publisher-linux-amd64" --output "$PWD/bin/publisher-image.tar"
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// User is the image's numeric user and group: no passwd file is needed.
const User = "65532:65532"

// Entrypoint is the binary's path in the image.
const Entrypoint = "/publisher"

func main() {
	binary := flag.String("binary", "bin/publisher-linux-amd64", "static linux/amd64 publisher binary")
	output := flag.String("output", "bin/publisher-image.tar", "image tarball to write")
	tag := flag.String("tag", "trafficmap-publisher:dev", "image reference recorded in the tarball")
	flag.Parse()
	if err := run(*binary, *output, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Println(*output)
}

func run(binary, output, tag string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	img, err := Build(binary)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(output, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", output, err)
	}
	return nil
}

// Build returns the image: one layer holding the binary at Entrypoint, mode 0555, owned by
// User, and a config with that entrypoint and user. Timestamps are fixed, so the same
// binary always gives the same image digest.
func Build(binary string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read --binary: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: Entrypoint[1:], Mode: 0o555, Size: int64(len(data)), Uid: 65532, Gid: 65532, ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return nil, fmt.Errorf("tar header: %w", err)
	}
	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("tar binary: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{Entrypoint}
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.title": "trafficmap-publisher"}
	return mutate.ConfigFile(img, cfg)
}
