//! The test control plane's certificates: one CA, made fresh for each
//! control plane, that signs every serving and client certificate, plus the
//! service-account signing key. Files are written the way kubeadm lays out
//! `/etc/kubernetes/pki`, so the component flags read like a real cluster's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate and its key, on disk and in memory.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate as a TLS peer presents it.
    pub cert_der: Vec<u8>,
}

/// The CA of one control plane. Its key lives only in this struct and in
/// `ca.key` under the control plane's directory, which goes with it.
pub struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
    ca_cert: PathBuf,
    ca_pem: String,
}

impl Pki {
    /// Creates the CA under `dir` (`ca.crt`, `ca.key`).
    pub fn create(dir: &Path) -> Result<Pki> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name("etcd-steward-testbed-ca", &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().context("generating the CA key")?;
        let cert = params.self_signed(&key).context("self-signing the CA")?;
        let ca_pem = cert.pem();
        let ca_cert = dir.join("ca.crt");
        write(&ca_cert, &ca_pem)?;
        write(&dir.join("ca.key"), &key.serialize_pem())?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            ca: Issuer::new(params, key),
            ca_cert,
            ca_pem,
        })
    }

    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// Where the CA and the certificates it signs are written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A serving certificate `<file>.crt` for `hosts` (DNS names or IPs).
    pub fn serving(&self, file: &str, cn: &str, hosts: &[&str]) -> Result<CertFiles> {
        self.for_hosts(file, cn, hosts, &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// A certificate that serves `hosts` and is a client too, as an etcd
    /// member's peer certificate must be (its peers check both ends).
    pub fn serving_and_client(&self, file: &str, cn: &str, hosts: &[&str]) -> Result<CertFiles> {
        self.for_hosts(
            file,
            cn,
            hosts,
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// As [`Pki::serving_and_client`], but valid only during 2020: expired.
    pub fn expired_serving_and_client(
        &self,
        file: &str,
        cn: &str,
        hosts: &[&str],
    ) -> Result<CertFiles> {
        let mut params = self.host_params(
            file,
            cn,
            hosts,
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        self.sign(file, params)
    }

    fn for_hosts(
        &self,
        file: &str,
        cn: &str,
        hosts: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> Result<CertFiles> {
        let params = self.host_params(file, cn, hosts, usages)?;
        self.sign(file, params)
    }

    fn host_params(
        &self,
        file: &str,
        cn: &str,
        hosts: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> Result<CertificateParams> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(cn, &[]);
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName((*h).try_into()?)),
            })
            .collect::<Result<_, rcgen::Error>>()
            .with_context(|| format!("the names of {file}"))?;
        params.extended_key_usages = usages.to_vec();
        Ok(params)
    }

    /// A client certificate: Kubernetes reads the user from the CN and the
    /// groups from the O attributes.
    pub fn client(&self, file: &str, user: &str, groups: &[&str]) -> Result<CertFiles> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(file, params)
    }

    /// As [`Pki::client`], but valid only until the start of `until`
    /// (year, month, day, UTC).
    pub fn client_valid_until(
        &self,
        file: &str,
        user: &str,
        until: (i32, u8, u8),
    ) -> Result<CertFiles> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(user, &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
        self.sign(file, params)
    }

    fn sign(&self, file: &str, mut params: CertificateParams) -> Result<CertFiles> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().with_context(|| format!("generating the key of {file}"))?;
        let cert = params
            .signed_by(&key, &self.ca)
            .with_context(|| format!("signing {file}"))?;
        let files = CertFiles {
            cert: self.dir.join(format!("{file}.crt")),
            key: self.dir.join(format!("{file}.key")),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
        };
        write(&files.cert, &files.cert_pem)?;
        write(&files.key, &files.key_pem)?;
        Ok(files)
    }

    /// The key pair that signs service-account tokens (`sa.key`, `sa.pub`).
    pub fn service_account_key(&self) -> Result<(PathBuf, PathBuf)> {
        let key = KeyPair::generate().context("generating the service-account key")?;
        let (private, public) = (self.dir.join("sa.key"), self.dir.join("sa.pub"));
        write(&private, &key.serialize_pem())?;
        write(&public, &key.public_key_pem())?;
        Ok((private, public))
    }
}

fn name(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn write(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
