package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
)

// The kubectl arguments the demo runs; the Go fallback prints the same facts.
var (
	getRouteWeights = []string{"get", "httproute", httproute.RouteName(service), "-n", namespace,
		"-o", `jsonpath=hostnames={.spec.hostnames[*]}{"\n"}{range .spec.rules[*].backendRefs[*]}{.name}={.weight}{"\n"}{end}`}
	getBackends = []string{"get", "services", "-n", namespace, "-l", ownedSelector,
		"-o", `custom-columns=SERVICE:.metadata.name,CLUSTER:.metadata.labels.publisher\.trafficmap\.dev/cluster,EXTERNALNAME:.spec.externalName,PORT:.spec.ports[0].port`}
	getPublished = []string{"get", "trafficmap", service, "-n", namespace,
		"-o", `jsonpath=generation={.metadata.generation}{range .status.conditions[?(@.type=="Published")]} Published: status={.status} reason={.reason} observedGeneration={.observedGeneration}{"\n"}message: {.message}{end}{"\n"}`}
	getLeftovers = []string{"get", "httproutes,services", "-n", namespace, "-l", httproute.LabelManagedBy + "=" + httproute.ManagedByValue}
)

// shower prints what an operator would look at: with the real kubectl when it is on PATH,
// otherwise the same facts read with the Go clients.
type shower struct {
	d          *demo
	kubectl    string // path of kubectl, "" when it is not installed
	kubeconfig string
	cacheDir   string
}

// newShower finds kubectl and says which way the demo prints.
func newShower(d *demo, kubeconfig string) *shower {
	s := &shower{d: d, kubeconfig: kubeconfig, cacheDir: filepath.Join(filepath.Dir(kubeconfig), "kubectl-cache")}
	path, err := exec.LookPath("kubectl")
	if err != nil {
		fmt.Println("kubectl is not on PATH: the demo prints the same facts from the Go client instead")
		return s
	}
	s.kubectl = path
	fmt.Printf("kubectl: %s, run with KUBECONFIG=%s (the demo's control plane)\n", path, kubeconfig)
	return s
}

// run prints and runs one kubectl command, copying its output (stdout and stderr) to stdout.
func (s *shower) run(ctx context.Context, args ...string) error {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	fmt.Println("$ kubectl " + strings.Join(quoted, " "))
	cmd := exec.CommandContext(ctx, s.kubectl, append([]string{"--cache-dir", s.cacheDir}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	out, err := cmd.CombinedOutput()
	os.Stdout.Write(out)
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(quoted, " "), err)
	}
	return nil
}

// state prints the TrafficMap (PUBLISHED column), the route's backend weights, the cluster
// of each backend Service and the Published condition.
func (s *shower) state(ctx context.Context) error {
	if s.kubectl != "" {
		for _, args := range [][]string{{"get", "trafficmap", service, "-n", namespace}, getRouteWeights, getBackends, getPublished} {
			if err := s.run(ctx, args...); err != nil {
				return err
			}
		}
		return nil
	}
	tm, err := s.d.tmc.OmeV1beta1().TrafficMaps(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get trafficmap: %w", err)
	}
	route, err := s.d.route(ctx)
	if err != nil {
		return err
	}
	svcs, err := s.d.ownedServices(ctx)
	if err != nil {
		return err
	}

	fmt.Println("# trafficmap prod/chat (Go client)")
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tPUBLISHED\tROUTABLE\tOVERRIDE\tREASON\tAGE")
	routable := condition(tm, v1beta1.ConditionRoutable)
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tm.Name, tm.Spec.Mode, condition(tm, v1beta1.ConditionPublished).Status,
		routable.Status, condition(tm, v1beta1.ConditionOverrideActive).Status, routable.Reason,
		duration.HumanDuration(time.Since(tm.CreationTimestamp.Time)))
	_ = tw.Flush()

	fmt.Println("# httproute prod/chat-global backend weights (Go client)")
	if route != nil {
		fmt.Printf("hostnames=%s\n", route.Spec.Hostnames[0])
		for _, ref := range route.Spec.Rules[0].BackendRefs {
			fmt.Printf("%s=%d\n", ref.Name, *ref.Weight)
		}
	}
	fmt.Println("# backend services (Go client)")
	tw = tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tCLUSTER\tEXTERNALNAME\tPORT")
	for _, svc := range svcs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", svc.Name, svc.Labels[httproute.LabelCluster], svc.Spec.ExternalName, svc.Spec.Ports[0].Port)
	}
	_ = tw.Flush()

	fmt.Println("# Published condition (Go client)")
	c := condition(tm, v1beta1.ConditionPublished)
	fmt.Printf("generation=%d Published: status=%s reason=%s observedGeneration=%d\nmessage: %s\n",
		tm.Generation, c.Status, c.Reason, c.ObservedGeneration, c.Message)
	return nil
}

// condition returns the condition of type typ, or an empty one.
func condition(tm *v1beta1.TrafficMap, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(tm.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// setDrain writes the seed's drain annotation on the InferenceService.
func (s *shower) setDrain(ctx context.Context) error {
	if s.kubectl != "" {
		return s.run(ctx, "annotate", "--overwrite", "inferenceservice", service, "-n", namespace, drainAnnotation+"="+drainValue)
	}
	fmt.Printf("(Go client) set annotation %s=%s on inferenceservice prod/chat\n", drainAnnotation, drainValue)
	return s.patchAnnotation(ctx, drainValue)
}

// removeDrain removes the drain annotation from the InferenceService.
func (s *shower) removeDrain(ctx context.Context) error {
	if s.kubectl != "" {
		return s.run(ctx, "annotate", "inferenceservice", service, "-n", namespace, drainAnnotation+"-")
	}
	fmt.Printf("(Go client) remove annotation %s from inferenceservice prod/chat\n", drainAnnotation)
	return s.patchAnnotation(ctx, nil)
}

// patchAnnotation sets the drain annotation to value, or removes it when value is nil.
func (s *shower) patchAnnotation(ctx context.Context, value any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{drainAnnotation: value}}})
	if err != nil {
		return fmt.Errorf("encode patch: %w", err)
	}
	_, err = s.d.dyn.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Patch(ctx, service, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch inferenceservice %s/%s: %w", namespace, service, err)
	}
	return nil
}

// deleteTrafficMap deletes the TrafficMap prod/chat.
func (s *shower) deleteTrafficMap(ctx context.Context) error {
	if s.kubectl != "" {
		return s.run(ctx, "delete", "trafficmap", service, "-n", namespace)
	}
	fmt.Println("(Go client) delete trafficmap prod/chat")
	if err := s.d.tmc.OmeV1beta1().TrafficMaps(namespace).Delete(ctx, service, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete trafficmap: %w", err)
	}
	return nil
}

// leftovers prints every HTTPRoute and Service in prod that the publisher manages.
func (s *shower) leftovers(ctx context.Context) error {
	if s.kubectl != "" {
		return s.run(ctx, getLeftovers...)
	}
	fmt.Println("# httproutes and services in prod labelled " + getLeftovers[len(getLeftovers)-1] + " (Go client)")
	sel := metav1.ListOptions{LabelSelector: getLeftovers[len(getLeftovers)-1]}
	routes, err := s.d.gw.GatewayV1().HTTPRoutes(namespace).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("list httproutes: %w", err)
	}
	svcs, err := s.d.kube.CoreV1().Services(namespace).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	for _, r := range routes.Items {
		fmt.Println("httproute/" + r.Name)
	}
	for _, svc := range svcs.Items {
		fmt.Println("service/" + svc.Name)
	}
	if len(routes.Items)+len(svcs.Items) == 0 {
		fmt.Println("No resources found in prod namespace.")
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain characters.
func shellQuote(s string) string {
	plain := s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@%+") == ""
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
