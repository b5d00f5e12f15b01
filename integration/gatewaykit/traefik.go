package gatewaykit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Versions hack/gateways.sh builds; the folder it prints names them.
const (
	TraefikVersion      = "v3.6.12"
	EnvoyGatewayVersion = "v1.9.1"
	// TraefikController is the controllerName Traefik serves GatewayClasses of.
	TraefikController = "traefik.io/gateway-controller"
)

// TraefikThrottle is Traefik's providersThrottleDuration, set to its default explicitly:
// after applying a new configuration, Traefik applies the next no sooner than this, while it
// writes route status at once.
const TraefikThrottle = 2 * time.Second

// Binary returns the path of gateway binary name in dir (the folder hack/gateways.sh
// prints), or an error saying how to build it.
func Binary(dir, name string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("no gateways folder for %s: give the folder bash hack/gateways.sh prints", name)
	}
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s (Traefik %s, Envoy Gateway %s): build it with bash hack/gateways.sh: %w", path, TraefikVersion, EnvoyGatewayVersion, err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", path)
	}
	return path, nil
}

// Traefik is a Traefik process serving one namespace's Gateways on one entry point.
type Traefik struct {
	Proc *Process
	Port int    // the entry point's port, which the Gateway's listener must name
	Addr string // 127.0.0.1:Port
}

// StartTraefik runs the traefik binary bin with its Kubernetes Gateway provider on the API
// server of the kubeconfig file, watching namespace ns, with one HTTP entry point "web" on
// a free port; its output goes to logPath. Stop it with Proc.Stop.
func StartTraefik(bin, kubeconfig, ns, logPath string) (*Traefik, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	tr := &Traefik{Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	cmd := exec.Command(bin,
		"--entrypoints.web.address="+tr.Addr,
		"--providers.kubernetesgateway=true",
		"--providers.kubernetesgateway.namespaces="+ns,
		"--providers.kubernetesgateway.statusaddress.ip=127.0.0.1",
		"--providers.providersthrottleduration="+TraefikThrottle.String(),
		"--global.checknewversion=false",
		"--global.sendanonymoususage=false",
		"--log.level=INFO")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if tr.Proc, err = StartProcess(cmd, logPath); err != nil {
		return nil, fmt.Errorf("traefik: %w", err)
	}
	return tr, nil
}
