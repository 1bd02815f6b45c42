package updater

import "context"

// CheckState is what the inspect listing shows of a tracked container's
// check.
type CheckState struct {
	Check    string // the label as parsed ("" without a check)
	State    string // pass, fail, invalid; "" without a check
	Withheld bool   // its records are kept out of the database
	Name     string // the container's name
	Domain   string // its name in the zone
}

// CheckStates returns the check state of every container the updater
// tracks, by container ID.
func (u *Updater) CheckStates() map[string]CheckState {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]CheckState, len(u.tracked))
	for id, t := range u.tracked {
		c := CheckState{Name: t.c.Name, Withheld: !t.counts(), Domain: t.c.fqdn()}
		switch {
		case t.bad != "":
			c.Check, c.State = t.bad, "invalid"
		case t.check != nil && t.healthy:
			c.Check, c.State = t.check.String(), "pass"
		case t.check != nil:
			c.Check, c.State = t.check.String(), "fail"
		}
		out[id] = c
	}
	return out
}

// Running asks the engine whether the container id runs (Weave's
// check-alive).
func (u *Updater) Running(ctx context.Context, id string) (bool, error) {
	c, err := u.eng.Inspect(ctx, id)
	return c.Running, err
}
