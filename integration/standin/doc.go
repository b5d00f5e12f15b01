// Package standin holds STAND-INS for the three third parties the publisher works with that
// cannot run here. Each behaves as the real one is documented to, and nothing else:
//
//   - Gateway: a Gateway API implementation's route-status writer. It serves the Gateways of
//     its GatewayClass and, per the Gateway API status contract, writes one status.parents
//     entry per parentRef under its own controllerName, merges conditions by type, sets
//     observedGeneration to the route's generation and never touches other entries.
//   - Routing: OME's routing controller as far as the publisher can see it: it writes the
//     TrafficMap spec (a drained entry gets weight 0 and the drain ID in drainRefs) and, by
//     server-side apply under field manager ome-trafficmap-routing, sourceUID and the
//     Routable and OverrideActive conditions.
//   - OMEPublisher: OME's built-in Gateway API publisher (gatewayapi) as it left a map it
//     published, for a migration (reference section 5.8): the route <name>-global and the
//     tmb- Services with OME's ownership labels, the journal naming gatewayapi with its
//     v1:httproute claim, and its Published condition, under field manager
//     ome-trafficmap-publisher.
//
// The integration tests and the demo use them; the publisher never imports this package.
package standin
