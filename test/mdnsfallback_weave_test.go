package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// weaveScriptFuncs are the DNS helpers of Weave Net's `weave` script
// (github.com/weaveworks/weave, file weave, Apache License 2.0), copied
// verbatim: http_call, call_weave, dns_args, put_dns_fqdn*,
// delete_dns and delete_dns_fqdn. check_running is stubbed (the router
// container is meshdns here), so call_weave prints every error body.
const weaveScriptFuncs = `
check_running() { return 0; }

http_call() {
    addr="$1"
    http_verb="$2"
    url="$3"
    shift 3
    CURL_TMPOUT=/tmp/weave_curl_out_$$
    HTTP_CODE=$(curl -o $CURL_TMPOUT -w '%{http_code}' --connect-timeout 3 -s -S -X $http_verb "$@" http://$addr$url) || return $?
    case "$HTTP_CODE" in
        2??) # 2xx -> not an error; output response on stdout
            [ -f $CURL_TMPOUT ] && cat $CURL_TMPOUT
            retval=0
            ;;
        404) # treat as error but swallow response
            retval=4
            ;;
        *) # anything else is an error; output response on stderr
            [ -f $CURL_TMPOUT ] && cat $CURL_TMPOUT >&2
            retval=1
    esac
    rm -f $CURL_TMPOUT
    return $retval
}

call_weave() {
    TMPERR=/tmp/call_weave_err_$$
    retval=0
    http_call $HTTP_ADDR "$@" 2>$TMPERR || retval=$?
    if [ $retval -ne 0 ] ; then
        check_running $CONTAINER_NAME && cat $TMPERR >&2
    fi
    rm -f $TMPERR
    return $retval
}

dns_args() {
    retval=0
    # NB: this is memoized
    DNS_DOMAIN=${DNS_DOMAIN:-$(call_weave GET /domain 2>/dev/null)} || retval=$?
    [ "$retval" -eq 4 ] && return 0
    DNS_DOMAIN=${DNS_DOMAIN:-weave.local.}
    DNS_ADDRESS=${DNS_ADDRESS:-$(call_weave GET /dns-address 2>/dev/null)}

    DNS_ARGS="--dns=$DNS_ADDRESS --dns-search=$DNS_DOMAIN"
}

put_dns_fqdn() {
    CHECK_ALIVE="-d check-alive=true"
    put_dns_fqdn_helper "$@"
}

put_dns_fqdn_no_check_alive() {
    CHECK_ALIVE=
    put_dns_fqdn_helper "$@"
}

put_dns_fqdn_helper() {
    CONTAINER_ID="$1"
    FQDN="$2"
    shift 2

    for ADDR in "$@" ; do
        call_weave PUT /name/$CONTAINER_ID/${ADDR%/*} --data-urlencode fqdn=$FQDN $CHECK_ALIVE || true
    done
}

delete_dns() {
    CONTAINER_ID="$1"
    shift 1

    for ADDR in "$@" ; do
        call_weave DELETE /name/$CONTAINER_ID/${ADDR%/*} || true
    done
}

delete_dns_fqdn() {
    CONTAINER_ID="$1"
    FQDN="$2"
    shift 2

    for ADDR in "$@" ; do
        call_weave DELETE /name/$CONTAINER_ID/${ADDR%/*}?fqdn=$FQDN || true
    done
}
`

// weaveReplay drives the helpers as the script's commands do (attach with
// a hostname, dns-add of an external name, dns-lookup, detach, dns-remove
// -h and dns-remove, status dns), printing what the test checks.
const weaveReplay = `
set -u
HTTP_ADDR=127.0.0.1:6785
CONTAINER_NAME=weave
C=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
lookup() { # weave dns-lookup
    DNS_ADDRESS=${DNS_ADDRESS_PORT:-$(call_weave GET /dns-address-port 2>/dev/null)}
    echo "$1: $(dig @${DNS_ADDRESS%:*} -p ${DNS_ADDRESS#*:} +short $1 | sort | tr '\n' ' ')"
}
dns_args; echo "dns-args: $DNS_ARGS"
put_dns_fqdn $C web.weave.local 10.32.0.1/12 10.32.0.2/12     # weave attach (hostname web.weave.local)
put_dns_fqdn $C alias.weave.local 10.32.0.1/12                # weave dns-add 10.32.0.1 $C -h alias.weave.local
put_dns_fqdn_no_check_alive weave:extern ext.weave.local 10.32.0.9  # weave dns-add 10.32.0.9 -h ext.weave.local
lookup web.weave.local
lookup alias.weave.local
lookup ext.weave.local
delete_dns_fqdn $C web.weave.local 10.32.0.1/12               # weave dns-remove 10.32.0.1 $C -h web.weave.local
lookup web.weave.local
lookup alias.weave.local
delete_dns $C 10.32.0.1                                       # weave dns-remove 10.32.0.1 $C
lookup alias.weave.local
delete_dns_fqdn $C web.weave.local 10.32.0.2/12               # weave detach
delete_dns_fqdn weave:extern ext.weave.local 10.32.0.9        # weave dns-remove 10.32.0.9 -h ext.weave.local
lookup web.weave.local
echo "status dns:"; call_weave GET /status/dns
`

// TestMdnsfallbackWeaveCLI replays the DNS calls of Weave's own `weave`
// script against meshdns: every call succeeds (call_weave prints the
// body of any non-2xx answer on stderr), and the names follow: a DELETE
// with ?fqdn= removes that name only, the identifier's other names stay.
func TestMdnsfallbackWeaveCLI(t *testing.T) {
	RequireTool(t, "dig", "dnsutils")
	RequireTool(t, "curl", "curl")
	a, _ := newHostPair(t)
	a.startMeshdns(t, "")
	script := filepath.Join(t.TempDir(), "weave.sh")
	if err := os.WriteFile(script, []byte(weaveScriptFuncs+weaveReplay), 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := a.exec(t, nil, "sh", "-c", "sh "+script+" 2>&1")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, raw)
	}
	// The PUT and DELETE answers are JSON (Weave's were empty 204s; the
	// script prints a 2xx body, and only checks the 2xx): one a call.
	var out string
	answers := 0
	for _, l := range strings.SplitAfter(raw, "\n") {
		if strings.HasPrefix(l, "{") {
			answers++
			if strings.Contains(l, `"error"`) {
				t.Fatalf("an API call failed: %s", l)
			}
			continue
		}
		out += l
	}
	if answers != 8 {
		t.Fatalf("%d JSON answers for 8 PUT and DELETE calls:\n%s", answers, raw)
	}
	want := `dns-args: --dns=127.0.0.1 --dns-search=weave.local.
web.weave.local: 10.32.0.1 10.32.0.2 
alias.weave.local: 10.32.0.1 
ext.weave.local: 10.32.0.9 
web.weave.local: 10.32.0.2 
alias.weave.local: 10.32.0.1 
alias.weave.local: 
web.weave.local: 
status dns:
`
	if out != want {
		t.Fatalf("replay of the weave script's calls:\n%s\nwant:\n%s", out, want)
	}
}
