package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trafficmap/publisher/integration/testenv"
)

// controlPlane is the embedded kube-apiserver and etcd, with the project's CRDs installed
// and a kubeconfig file for kubectl.
type controlPlane struct {
	env        *envtest.Environment
	cfg        *rest.Config // cluster-admin config for the Go clients and the publisher
	dir        string       // temp dir holding the kubeconfig and kubectl's cache
	kubeconfig string       // path of a kubeconfig for the user "demo" (system:masters)
}

// startControlPlane starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS with envtest,
// installs the TrafficMap CRD, the stand-in InferenceService CRD and Gateway API's CRDs
// (testenv.CRDPaths) and writes a kubeconfig to a temp dir.
func startControlPlane() (*controlPlane, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run `make demo`, which builds kube-apiserver and etcd (hack/controlplane.sh) and sets it")
	}
	fmt.Println("Starting kube-apiserver and etcd (envtest) from " + assets + " ...")
	crds, err := testenv.CRDPaths()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
	}
	cp := &controlPlane{env: env, cfg: cfg}
	if err := cp.writeKubeconfig(); err != nil {
		_ = cp.stop()
		return nil, err
	}
	return cp, nil
}

// writeKubeconfig adds the user "demo" in group system:masters and writes its kubeconfig.
func (cp *controlPlane) writeKubeconfig() error {
	user, err := cp.env.AddUser(envtest.User{Name: "demo", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add control plane user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if cp.dir, err = os.MkdirTemp("", "publisher-demo-"); err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	cp.kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	if err := os.WriteFile(cp.kubeconfig, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// stop removes the temp dir and stops kube-apiserver and etcd.
func (cp *controlPlane) stop() error {
	if cp.dir != "" {
		_ = os.RemoveAll(cp.dir)
	}
	if err := cp.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}
