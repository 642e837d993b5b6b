package launch

import (
	"context"
	"strings"
	"testing"
)

func TestRendezvousBind(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		kind      LauncherKind
		addr      string
		hosts     []string
		bind, adv string
		wantErr   string
	}{
		{LauncherLocal, "", nil, "127.0.0.1:0", "", ""},
		{LauncherSSH, "10.1.2.3", []string{"a"}, "10.1.2.3:0", "", ""},
		{LauncherSSH, "10.1.2.3:29400", []string{"a"}, "10.1.2.3:29400", "", ""},
		{LauncherSSH, "front.example:29400", []string{"a"}, "0.0.0.0:29400", "front.example", ""},
		// Every host is this machine: loopback will do.
		{LauncherSSH, "", []string{"127.0.0.1", "localhost"}, "127.0.0.1:0", "", ""},
		{LauncherSlurm, "", []string{"no-such-host.invalid"}, "", "", "gaspirun cannot tell which of its addresses the hosts reach: no-such-host.invalid does not resolve here"},
	}
	for _, c := range cases {
		cfg := LocalConfig()
		cfg.RendezvousAddr = c.addr
		var hosts []HostSlots
		for _, h := range c.hosts {
			hosts = append(hosts, HostSlots{Name: h, Slots: 1})
		}
		bind, adv, err := rendezvousBind(ctx, cfg, c.kind, hosts)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s %q %v: %v, want %q", c.kind, c.addr, c.hosts, err, c.wantErr)
			}
			continue
		}
		if err != nil || bind != c.bind || adv != c.adv {
			t.Errorf("%s %q %v: %q %q %v, want %q %q", c.kind, c.addr, c.hosts, bind, adv, err, c.bind, c.adv)
		}
	}
}
