package example.ticketing;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateExpiredException;
import java.security.cert.CertificateFactory;
import java.security.cert.CertificateNotYetValidException;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * The TLS context of a client, made from PEM files as the C library takes
 * them: the CA that signs the servers' certificates, and optionally the
 * client's certificate and its private key (PKCS#8 {@code PRIVATE KEY},
 * SEC1 {@code EC PRIVATE KEY} or PKCS#1 {@code RSA PRIVATE KEY}, not
 * encrypted). Every problem is found here, before any connection: a client
 * never believes a connection is encrypted when it cannot be.
 */
final class TlsFiles {
    private static final byte[] OID_EC_PUBLIC_KEY = {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
    private static final byte[] ALG_RSA = {0x30, 0x0d, 0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86,
        (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00};

    private TlsFiles() {}

    static SSLContext context(Path ca, Path cert, Path key) {
        try {
            KeyStore trust = KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            List<X509Certificate> cas = certificates(ca);
            for (int i = 0; i < cas.size(); i++) {
                trust.setCertificateEntry("ca" + i, cas.get(i));
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
            tmf.init(trust);
            KeyManagerFactory kmf = null;
            if (cert != null) {
                List<X509Certificate> chain = certificates(cert);
                X509Certificate leaf = chain.get(0);
                try {
                    leaf.checkValidity();
                } catch (CertificateExpiredException | CertificateNotYetValidException e) {
                    throw new ConfigException("tls", cert + ": the certificate is not valid now ("
                            + e.getMessage() + ")");
                }
                PrivateKey pk = privateKey(key);
                checkPair(pk, leaf, cert, key);
                char[] pw = new char[0];
                KeyStore ks = KeyStore.getInstance("PKCS12");
                ks.load(null, null);
                ks.setKeyEntry("client", pk, pw, chain.toArray(new Certificate[0]));
                kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(ks, pw);
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            return ctx;
        } catch (GeneralSecurityException | IOException e) {
            throw new ConfigException("tls", "TLS settings cannot work: " + e);
        }
    }

    private static List<X509Certificate> certificates(Path file) {
        byte[] data = read(file);
        List<X509Certificate> out = new ArrayList<>();
        try {
            Collection<? extends Certificate> all = CertificateFactory.getInstance("X.509")
                    .generateCertificates(new ByteArrayInputStream(data));
            for (Certificate c : all) {
                out.add((X509Certificate) c);
            }
        } catch (CertificateException e) {
            throw new ConfigException("tls", file + ": not a PEM certificate (" + e.getMessage() + ")");
        }
        if (out.isEmpty()) {
            throw new ConfigException("tls", file + ": no PEM certificate in it");
        }
        return out;
    }

    private static byte[] read(Path file) {
        try {
            return Files.readAllBytes(file);
        } catch (IOException e) {
            throw new ConfigException("tls", file + ": cannot be read (" + e + ")");
        }
    }

    private static PrivateKey privateKey(Path file) {
        String text = new String(read(file), StandardCharsets.US_ASCII);
        for (String type : new String[] {"PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"}) {
            byte[] der = pemBlock(text, type);
            if (der == null) {
                continue;
            }
            byte[] pkcs8;
            String[] algs;
            switch (type) {
                case "EC PRIVATE KEY":
                    pkcs8 = sec1ToPkcs8(der, file);
                    algs = new String[] {"EC"};
                    break;
                case "RSA PRIVATE KEY":
                    pkcs8 = tlv(0x30, concat(new byte[] {0x02, 0x01, 0x00}, ALG_RSA, tlv(0x04, der)));
                    algs = new String[] {"RSA"};
                    break;
                default:
                    pkcs8 = der;
                    algs = new String[] {"EC", "RSA", "Ed25519", "Ed448", "RSASSA-PSS"};
            }
            for (String alg : algs) {
                try {
                    return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(pkcs8));
                } catch (GeneralSecurityException e) {
                    // not this algorithm: try the next one
                }
            }
            throw new ConfigException("tls", file + ": the private key cannot be read");
        }
        if (text.contains("ENCRYPTED PRIVATE KEY")) {
            throw new ConfigException("tls", file + ": an encrypted private key (use one without a passphrase)");
        }
        throw new ConfigException("tls", file + ": no PEM private key in it");
    }

    /** The DER bytes of the first PEM block of that type, or null. */
    private static byte[] pemBlock(String text, String type) {
        String begin = "-----BEGIN " + type + "-----";
        String end = "-----END " + type + "-----";
        int b = text.indexOf(begin);
        if (b < 0) {
            return null;
        }
        int e = text.indexOf(end, b);
        if (e < 0) {
            return null;
        }
        try {
            return Base64.getMimeDecoder().decode(text.substring(b + begin.length(), e));
        } catch (IllegalArgumentException x) {
            return null;
        }
    }

    /**
     * SEC1 ECPrivateKey (RFC 5915) into PKCS#8: the curve comes from its
     * {@code [0]} parameters, which OpenSSL always writes.
     */
    private static byte[] sec1ToPkcs8(byte[] sec1, Path file) {
        int[] seq = header(sec1, 0);
        if (seq == null || sec1[0] != 0x30) {
            throw new ConfigException("tls", file + ": a malformed EC private key");
        }
        int p = seq[0];
        int end = p + seq[1];
        while (p < end) {
            int[] h = header(sec1, p);
            if (h == null) {
                break;
            }
            if ((sec1[p] & 0xff) == 0xa0) {
                byte[] oid = new byte[h[1]];
                System.arraycopy(sec1, h[0], oid, 0, h[1]);
                byte[] alg = tlv(0x30, concat(OID_EC_PUBLIC_KEY, oid));
                return tlv(0x30, concat(new byte[] {0x02, 0x01, 0x00}, alg, tlv(0x04, sec1)));
            }
            p = h[0] + h[1];
        }
        throw new ConfigException("tls", file + ": the EC private key does not name its curve");
    }

    /** {content offset, content length} of the DER element at p, or null. */
    private static int[] header(byte[] d, int p) {
        if (p + 2 > d.length) {
            return null;
        }
        int len = d[p + 1] & 0xff;
        int q = p + 2;
        if (len >= 0x80) {
            int n = len & 0x7f;
            if (n == 0 || n > 3 || q + n > d.length) {
                return null;
            }
            len = 0;
            for (int i = 0; i < n; i++) {
                len = (len << 8) | (d[q++] & 0xff);
            }
        }
        return q + len > d.length ? null : new int[] {q, len};
    }

    private static byte[] tlv(int tag, byte[] content) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(tag);
        int n = content.length;
        if (n < 0x80) {
            out.write(n);
        } else if (n < 0x100) {
            out.write(0x81);
            out.write(n);
        } else if (n < 0x10000) {
            out.write(0x82);
            out.write(n >> 8);
            out.write(n & 0xff);
        } else {
            out.write(0x83);
            out.write(n >> 16);
            out.write((n >> 8) & 0xff);
            out.write(n & 0xff);
        }
        out.writeBytes(content);
        return out.toByteArray();
    }

    private static byte[] concat(byte[]... parts) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            out.writeBytes(p);
        }
        return out.toByteArray();
    }

    /** Signs with the key and verifies with the certificate: they must be a pair. */
    private static void checkPair(PrivateKey pk, X509Certificate cert, Path certFile, Path keyFile) {
        String alg;
        switch (pk.getAlgorithm()) {
            case "EC":
                alg = "SHA256withECDSA";
                break;
            case "RSA":
                alg = "SHA256withRSA";
                break;
            default:
                alg = pk.getAlgorithm(); // EdDSA keys name their own signature
        }
        try {
            byte[] probe = Proto.ascii("ticketing key check");
            Signature s = Signature.getInstance(alg);
            s.initSign(pk);
            s.update(probe);
            byte[] sig = s.sign();
            Signature v = Signature.getInstance(alg);
            v.initVerify(cert.getPublicKey());
            v.update(probe);
            if (v.verify(sig)) {
                return;
            }
        } catch (GeneralSecurityException e) {
            // a key of another type than the certificate's: not a pair
        }
        throw new ConfigException("tls", keyFile + " is not the private key of " + certFile);
    }
}
