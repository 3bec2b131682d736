package sandchat_test

import (
	"testing"

	"github.com/sandchat/sandchat"
)

// TestRoleRules: who may do what, decided without a database.
func TestRoleRules(t *testing.T) {
	check := []struct {
		name, role string
		want       []string
		code       string
	}{
		{"owner edits", sandchat.RoleOwner, sandchat.Editors, ""},
		{"editor edits", sandchat.RoleEditor, sandchat.Editors, ""},
		{"viewer reads", sandchat.RoleViewer, sandchat.Anyone, ""},
		{"viewer may not edit", sandchat.RoleViewer, sandchat.Editors, sandchat.EFORBIDDEN},
		{"editor may not manage members", sandchat.RoleEditor, []string{sandchat.RoleOwner}, sandchat.EFORBIDDEN},
	}
	for _, tc := range check {
		t.Run(tc.name, func(t *testing.T) {
			err := sandchat.CheckRole(tc.role, "Agent", tc.want...)
			if c := sandchat.ErrorCode(err); c != tc.code {
				t.Fatalf("code %q, want %q (%v)", c, tc.code, err)
			}
			if err != nil && sandchat.ErrorMessage(err) != "Your role ("+tc.role+") does not allow this on the agent." {
				t.Fatalf("message %q", sandchat.ErrorMessage(err))
			}
			if edits := sandchat.CanEdit(tc.role); edits != (sandchat.CheckRole(tc.role, "", sandchat.Editors...) == nil) {
				t.Fatalf("CanEdit(%s) = %v disagrees with Editors", tc.role, edits)
			}
		})
	}
	grant := []struct {
		name          string
		owner, member int64
		role, code    string
	}{
		{"editor", 1, 2, sandchat.RoleEditor, ""},
		{"viewer", 1, 2, sandchat.RoleViewer, ""},
		{"owner is no member role", 1, 2, sandchat.RoleOwner, sandchat.EINVALID},
		{"unknown role", 1, 2, "admin", sandchat.EINVALID},
		{"the owner cannot be a member", 1, 1, sandchat.RoleViewer, sandchat.EINVALID},
	}
	for _, tc := range grant {
		t.Run("grant "+tc.name, func(t *testing.T) {
			if c := sandchat.ErrorCode(sandchat.CheckGrant(tc.owner, tc.member, tc.role)); c != tc.code {
				t.Fatalf("code %q, want %q", c, tc.code)
			}
		})
	}
	if sandchat.CanEdit("") || sandchat.CanEdit(sandchat.RoleViewer) {
		t.Fatal("no role or a viewer can edit")
	}
}
