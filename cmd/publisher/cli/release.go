package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// releaseTimeout bounds release-finalizers.
const releaseTimeout = 2 * time.Minute

const releaseLong = `release-finalizers removes the publisher's finalizer (` + model.Finalizer + `) from every
TrafficMap, or from those of one namespace with -n, and nothing else: routes, Services and xDS
resources are not touched. It is the escape hatch of an uninstall: a map the finalizer holds
while no publisher runs would otherwise never go. Once released, a deleted map goes at once, and
the garbage collector removes its route and Services through their ownerReferences.

Run it after the publisher is stopped (a running publisher adds the finalizer again to every map
it publishes). It needs list and patch on trafficmaps.ome.io. In-cluster it uses the pod's
service account.

Exit codes: 0 released (or nothing to release), 1 error.`

// newReleaseCommand returns 'publisher release-finalizers'. Every error exits 1.
func newReleaseCommand(stdout io.Writer) *cobra.Command {
	kf := newKubeFlags()
	cmd := &cobra.Command{
		Use:   "release-finalizers [-n NAMESPACE] [flags]",
		Short: "Remove the publisher's finalizer from every TrafficMap (uninstall), touching nothing else",
		Long:  releaseLong,
		Example: `  # before uninstalling the publisher, after stopping it
  publisher release-finalizers
  publisher release-finalizers -n prod`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exit(exitFailure, fmt.Errorf("unexpected arguments %q; release-finalizers takes no service", args))
			}
			rc, err := kf.loader().ClientConfig()
			if err != nil {
				return exit(exitFailure, fmt.Errorf("load kubeconfig: %w", err))
			}
			maps, err := omeclient.NewForConfig(rc)
			if err != nil {
				return exit(exitFailure, fmt.Errorf("build trafficmap client: %w", err))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), releaseTimeout)
			defer cancel()
			released, err := publish.ReleaseFinalizers(ctx, maps, kf.namespace(), publish.DefaultFieldManager)
			for _, key := range released {
				fmt.Fprintf(stdout, "trafficmap %s released\n", key)
			}
			if err != nil {
				return exit(exitFailure, err)
			}
			fmt.Fprintf(stdout, "%d trafficmap(s) released\n", len(released))
			return nil
		},
	}
	kf.AddFlags(cmd.Flags())
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return exit(exitFailure, fmt.Errorf("%w; use --help", err))
	})
	return cmd
}
