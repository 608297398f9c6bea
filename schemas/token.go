package schemas

import (
	"fmt"
	"time"
)

// Role is what an API token may do. Each role includes the ones below it:
// [RoleViewer] < [RoleOperator] < [RoleAdmin].
type Role string

// The roles of API tokens.
const (
	// RoleViewer may read everything: every GET of the API.
	RoleViewer Role = "viewer"
	// RoleOperator may also act on runs: fire, rerun, cancel, enable,
	// disable, pause, resume, acknowledge alerts.
	RoleOperator Role = "operator"
	// RoleAdmin may do everything: apply task definitions, manage tokens,
	// alert rules and channels.
	RoleAdmin Role = "admin"
)

// Roles lists the roles, weakest first.
var Roles = []Role{RoleViewer, RoleOperator, RoleAdmin}

// ParseRole returns the role called s, or an error that lists the roles.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if r.rank() == 0 {
		return "", fmt.Errorf("role %q: use viewer, operator or admin", s)
	}
	return r, nil
}

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Includes reports whether a token of role r may do what needs role need.
// An unknown role includes nothing.
func (r Role) Includes(need Role) bool { return r.rank() > 0 && r.rank() >= need.rank() }

// Token is an API token as the store keeps it and the API shows it:
// everything but its secret, of which only the hash is kept.
type Token struct {
	ID int64 `json:"id"`
	// Name is recorded as the operator of every change made with the token.
	Name      string    `json:"name"`
	Role      Role      `json:"role"`
	CreatedAt time.Time `json:"created_at"`
	// LastUsedAt is when a request last used the token, to within a minute;
	// nil when none did.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	// RevokedAt is when the token was revoked; nil while it is live.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}
