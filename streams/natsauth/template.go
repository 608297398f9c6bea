package natsauth

import (
	"fmt"
	"strings"

	"github.com/ax-scheduler/ax/streams"
)

// The placeholders of [WorkerUserTemplate]: where a worker's id and its
// password go. Neither is a token of the topology, nor a worker id the chart
// gives (a pod's name: lower-case letters, digits and '-'), so replacing
// them touches nothing else.
const (
	WorkerIDPlaceholder = "__AX_WORKER_ID__"
	PasswordPlaceholder = "__AX_NATS_PASSWORD__"
)

// WorkerUserTemplate renders the worker user ([WorkerUserName]) of one
// worker of scope's pools and handlers as one user of a nats-server
// authorization block, with [WorkerIDPlaceholder] for the worker id and
// [PasswordPlaceholder] for the password (quoted): replacing both gives the
// user of any worker, with exactly the permissions [Permissions] builds for
// it. The Helm chart writes one user per executor replica from it. scope's
// WorkerID is ignored; its pools and handlers must pass [Scope.Check].
func WorkerUserTemplate(top streams.Topology, scope Scope) (string, error) {
	scope.WorkerID = WorkerIDPlaceholder
	if err := scope.Check(); err != nil {
		return "", err
	}
	if len(scope.Pools) == 0 {
		return "", fmt.Errorf("a worker user must name the pools its worker serves")
	}
	name := WorkerUserName(WorkerIDPlaceholder)
	var b strings.Builder
	writeUser(&b, fmt.Sprintf("      user: %q\n      password: %q\n", name, PasswordPlaceholder),
		Permissions(top, Executor, name, scope))
	return b.String(), nil
}

// ServicesServerConfig renders the authorization block of [ServerConfig]
// without the executor's user: the dispatcher's, trigger's, api's and
// auditor's, for a deployment whose every executor has a worker user of its
// own (the Helm chart's, from [WorkerUserTemplate]).
func ServicesServerConfig(top streams.Topology) string {
	return serverConfig(top, Scope{}, func(role Role) string {
		if role == Executor {
			return ""
		}
		return fmt.Sprintf("      user: %q\n      password: $%s\n", role, PasswordEnv(role))
	})
}
