package sandchat

// Member roles on agents and conversations. The owner is not a member row: ownership
// is a column on the resource and implies every right.
const (
	RoleOwner  = "owner"
	RoleEditor = "editor"
	RoleViewer = "viewer"
)

// Editors and Anyone are the role sets for writes and reads.
var (
	Editors = []string{RoleOwner, RoleEditor}
	Anyone  = []string{RoleOwner, RoleEditor, RoleViewer}
)

// ValidRole reports whether r can be granted to a member.
func ValidRole(r string) bool { return r == RoleEditor || r == RoleViewer }

// CanEdit reports whether role may change a resource (owners and editors).
func CanEdit(role string) bool { return role == RoleOwner || role == RoleEditor }

// CheckRole allows an action that needs one of want to a caller holding role on a
// resource named noun ("Agent"); anyone else is forbidden, told which role they hold.
// A caller with no role never gets here: the stores answer "not found" for them, so
// existence does not leak.
func CheckRole(role, noun string, want ...string) error {
	for _, w := range want {
		if role == w {
			return nil
		}
	}
	return Errorf(EFORBIDDEN, "Your role (%s) does not allow this on the %s.", role, lower(noun))
}

// CheckMemberRole refuses a role that cannot be granted to a member.
func CheckMemberRole(role string) error {
	if !ValidRole(role) {
		return Errorf(EINVALID, "role must be %q or %q.", RoleEditor, RoleViewer)
	}
	return nil
}

// CheckGrant is the rule for the owner ownerID giving userID a role: only editor or
// viewer can be granted, and the owner cannot also be a member.
func CheckGrant(ownerID, userID int64, role string) error {
	if err := CheckMemberRole(role); err != nil {
		return err
	}
	if userID == ownerID {
		return Errorf(EINVALID, "The owner cannot also be a member.")
	}
	return nil
}

func lower(s string) string {
	if s == "" {
		return s
	}
	b := []byte(s)
	if b[0] >= 'A' && b[0] <= 'Z' {
		b[0] += 'a' - 'A'
	}
	return string(b)
}
