package v1alpha1

import "time"

// Activity is the session's last activity: the later of status.lastActivity and the
// SessionLastActivityAnnotation (an unparsable annotation is ignored); zero when neither is set.
func (s *AgentSession) Activity() time.Time {
	var t time.Time
	if s.Status.LastActivity != nil {
		t = s.Status.LastActivity.Time
	}
	if v, ok := s.Annotations[SessionLastActivityAnnotation]; ok {
		if a, err := time.Parse(time.RFC3339Nano, v); err == nil && a.After(t) {
			t = a
		}
	}
	return t
}
