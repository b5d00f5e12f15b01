// Command demo runs the TrafficMap publisher's main job on an embedded control plane
// (kube-apiserver and etcd, started with controller-runtime's envtest).
//
// It publishes the TrafficMap of the OME seed "Drain a workload cluster" (InferenceService
// chat in prod on worker-a and worker-b, weight 1 each) as an HTTPRoute, drains worker-a the
// way the seed does, undrains it, and deletes the map. After each step it shows what an
// operator would check: `kubectl get trafficmap` (the PUBLISHED column), the route's backend
// weights and the Published condition.
//
// The gateway controller and OME's routing controller cannot run here; the stand-ins of
// integration/standin play their parts, and the demo says each time one of them acts.
//
// Run it with `make demo`, which builds the control plane and sets KUBEBUILDER_ASSETS. It
// exits non-zero on any failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trafficmap/publisher/publish"
)

// The seed's names.
const (
	namespace       = "prod"
	service         = "chat" // the InferenceService and its TrafficMap
	gatewayName     = "global"
	globalHost      = "chat.example.com"
	drainAnnotation = "ome.io/traffic-drain"
	drainID         = "maintenance-a"
	drainedCluster  = "worker-a"
	drainValue      = `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`
)

// Every wait polls for at most waitTimeout.
const (
	waitTimeout  = 60 * time.Second
	pollInterval = 100 * time.Millisecond
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo finished: every step passed")
}

// run starts the control plane, the stand-in gateway and the publisher, and runs the steps.
func run(ctx context.Context) (err error) {
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging; errors come back as values

	started := time.Now()
	cp, err := startControlPlane()
	if err != nil {
		return err
	}
	fmt.Printf("control plane started in %s\n", since(started))
	defer func() {
		stopErr := cp.stop()
		if stopErr == nil {
			fmt.Println("control plane stopped")
		}
		err = errors.Join(err, stopErr)
	}()

	gwCtx, stopGateway := context.WithCancel(ctx)
	defer stopGateway()
	d, err := newDemo(cp)
	if err != nil {
		return err
	}
	if err := timed(gwCtx, d.setup); err != nil {
		return err
	}

	pub, err := startPublisher(ctx, cp.cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pub.stop()) }()
	d.pub = pub
	fmt.Println("publisher started in-process: --namespace prod --gateway prod/global --require-route-accepted (logs at warn level go to stderr)")

	for _, step := range []func(context.Context) error{d.initialPublish, d.drain, d.undrain, d.deleteMap} {
		if err := timed(ctx, step); err != nil {
			return err
		}
	}
	if err := pub.stop(); err != nil {
		return err
	}
	fmt.Println("publisher stopped")
	stopGateway()
	return nil
}

// timed runs step and, when it passes, prints how long it took.
func timed(ctx context.Context, step func(context.Context) error) error {
	started := time.Now()
	if err := step(ctx); err != nil {
		return err
	}
	fmt.Printf("(step took %s)\n", since(started))
	return nil
}

// since returns the time since t, rounded to 0.1s.
func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// runningPublisher is the publisher running in a goroutine.
type runningPublisher struct {
	cancel  context.CancelFunc
	exited  chan struct{} // closed when Run has returned
	err     error         // Run's result, valid once exited is closed
	stopped bool
}

// startPublisher runs the publisher as `publisher run --namespace prod --gateway prod/global
// --require-route-accepted` would, logging at warn level to stderr.
func startPublisher(ctx context.Context, cfg *rest.Config) (*runningPublisher, error) {
	enc := zap.NewDevelopmentEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.WarnLevel)).Named("publisher")
	p, err := publish.New(publish.Config{
		Namespaces:           []string{namespace},
		Gateway:              types.NamespacedName{Namespace: namespace, Name: gatewayName},
		RequireRouteAccepted: true,
	}, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("create publisher: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runningPublisher{cancel: cancel, exited: make(chan struct{})}
	go func() {
		r.err = p.Run(ctx)
		close(r.exited)
	}()
	return r, nil
}

// check returns an error when the publisher has exited on its own.
func (r *runningPublisher) check() error {
	select {
	case <-r.exited:
		if r.err != nil {
			return fmt.Errorf("publisher exited: %w", r.err)
		}
		return errors.New("publisher exited")
	default:
		return nil
	}
}

// stop cancels the publisher and waits for Run to return; calling it again does nothing.
func (r *runningPublisher) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	r.cancel()
	select {
	case <-r.exited:
		if r.err != nil {
			return fmt.Errorf("publisher: %w", r.err)
		}
		return nil
	case <-time.After(waitTimeout):
		return fmt.Errorf("publisher did not stop within %s", waitTimeout)
	}
}
