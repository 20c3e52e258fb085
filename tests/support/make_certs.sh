#!/bin/sh
# Test certificates for TLS, made with openssl into directory $1:
#   ca.pem/ca.key            the cluster's CA
#   node.pem/node.key        a server and peer certificate for localhost and 127.0.0.1
#   client.pem/client.key    a client certificate signed by the CA
#   expired.pem/expired.key  signed by the CA, no longer valid
#   other-ca.pem             another CA; other.pem/other.key signed by it
#   wrongname.pem/.key       signed by the CA for a name that is not ours
#   peer-ca.pem              a CA of the peer port alone; peer.pem/peer.key signed by it
set -eu
d="$1"
mkdir -p "$d"
cd "$d"
key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
ca() { # name subject
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$1.pem" 2>/dev/null
}
leaf() { # name cn san ca ok|expired
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" > "$1.ext"
    if [ "$5" = expired ]; then
        # Valid for one day, two days ago: openssl x509 cannot backdate, so
        # use the ca command's explicit dates.
        mkdir -p "ca-$1" && : > "ca-$1/index.txt" && echo 01 > "ca-$1/serial"
        cat > "ca-$1/ca.cnf" <<CNF
[ca]
default_ca = d
[d]
dir = ca-$1
database = \$dir/index.txt
serial = \$dir/serial
new_certs_dir = \$dir
default_md = sha256
policy = p
copy_extensions = copy
[p]
commonName = supplied
CNF
        openssl ca -batch -config "ca-$1/ca.cnf" -cert "$4.pem" -keyfile "$4.key" \
            -startdate 20200101000000Z -enddate 20200102000000Z -extfile "$1.ext" \
            -in "$1.csr" -out "$1.pem" -notext 2>/dev/null
        rm -rf "ca-$1"
    else
        openssl x509 -req -in "$1.csr" -CA "$4.pem" -CAkey "$4.key" -CAcreateserial \
            -days 825 -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    fi
    rm -f "$1.csr" "$1.ext"
}
ca ca "Ticketing test CA"
ca other-ca "Another CA"
leaf node localhost "DNS:localhost,IP:127.0.0.1" ca ok
leaf client event-server "DNS:event-server" ca ok
leaf expired localhost "DNS:localhost,IP:127.0.0.1" ca expired
leaf other localhost "DNS:localhost,IP:127.0.0.1" other-ca ok
leaf wrongname elsewhere.example "DNS:elsewhere.example" ca ok
ca peer-ca "Ticketing test peer CA"
leaf peer localhost "DNS:localhost,IP:127.0.0.1" peer-ca ok
chmod 600 ./*.key
