package transport

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/auth"
)

func TestAppTypes(t *testing.T) {
	for typ, want := range map[Type]string{TypeApps: "apps", TypeAppPut: "app-put", TypeAppRotate: "app-rotate", TypeAppDelete: "app-delete"} {
		if typ.String() != want || (typ|ResponseBit).String() != want {
			t.Errorf("type %d is %q, want %q", uint8(typ), typ.String(), want)
		}
	}
	// What the list answers holds no secret material, whatever it is given.
	b, err := json.Marshal(AppInfo{Code: "billing", Admin: true, Send: []string{"orders.*"},
		Consume: []auth.Grant{{Subject: "*", Group: "g"}}, MaxSubjects: 1, MaxConsumerGroups: 1, Subjects: 1, ConsumerGroups: 1, Secrets: 2, OldSecretExpires: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{`"salt"`, `"hash"`, `"secret"`} {
		if strings.Contains(string(b), banned) {
			t.Errorf("AppInfo encodes %s: %s", banned, b)
		}
	}
}
