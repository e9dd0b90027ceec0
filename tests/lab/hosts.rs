//! Simulated hosts: each host of a scenario is a set of fresh Linux namespaces (UTS, mount,
//! network) held open by a `sleep` process started with `unshare`; its interfaces are veth
//! pairs whose other ends sit on a bridge in the scenario's own network namespace (or dummy
//! interfaces). Inside each host's mount namespace the boot id, `/dev/shm` and the `/sys` and
//! `/proc` files host-facts reads are replaced by bind mounts and tmpfs. Nothing is changed in
//! the machine's own namespaces; dropping a [`Fabric`] kills the holders, which takes every
//! namespace, mount and interface with it (also when a test panics).

use crate::scenario::{bytes, Host};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A process holding namespaces open; killed on drop.
struct Holder {
    child: Child,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Holder {
    /// Runs `script` under `unshare FLAGS` and waits for its "ready" line.
    fn start(flags: &[&str], script: &str, log: &Path) -> Result<Self, String> {
        let mut child = Command::new("unshare")
            .args(flags)
            .args(["--", "sh", "-ec", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        let mut line = String::new();
        let out = child.stdout.take().expect("piped");
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let h = Holder { child };
        if line.trim() != "ready" {
            let err = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("namespace setup failed: {}", err.trim()));
        }
        Ok(h)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Single-quotes a value for `sh`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `cmd` inside the network namespace of `pid`.
fn in_net(pid: u32, cmd: &[&str]) -> Result<(), String> {
    let o = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg("--")
        .args(cmd)
        .output()
        .map_err(|e| format!("nsenter: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{}: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

/// The deepest existing ancestor of `p` (where a tmpfs must go so `p` can be created).
fn existing_ancestor(p: &Path) -> PathBuf {
    let mut a = p.to_path_buf();
    while !a.exists() {
        a = a
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| "/".into());
    }
    a
}

/// The mount-namespace setup of one host, as a shell script run inside it.
fn host_script(h: &Host, dir: &Path, boot_id: &str, libs: &Path) -> Result<String, String> {
    let mut sc = String::new();
    sc.push_str(&format!("hostname {}\n", sh_quote(&h.name)));
    // Every host finds its own libraries at the same path, as hosts of one cluster do.
    sc.push_str(&format!(
        "mount --bind {} {}\n",
        sh_quote(&dir.join("lib").display().to_string()),
        sh_quote(&libs.display().to_string())
    ));
    let shm = bytes(h.dev_shm.as_deref().unwrap_or("16G"))?;
    let mode = h.dev_shm_mode.as_deref().unwrap_or("1777");
    let ro = if h.dev_shm_readonly { ",ro" } else { "" };
    sc.push_str(&format!(
        "mount -t tmpfs -o size={shm},mode={mode}{ro} lab-shm /dev/shm\n"
    ));
    let boot = dir.join("boot_id");
    std::fs::write(&boot, format!("{boot_id}\n")).map_err(|e| e.to_string())?;
    sc.push_str(&format!(
        "mount --bind {} /proc/sys/kernel/random/boot_id\n",
        sh_quote(&boot.display().to_string())
    ));
    // Paths to create: a tmpfs goes on the deepest existing ancestor of each missing one
    // (hiding what was there, inside this namespace only); existing files get a bind mount.
    let mut tmpfs: Vec<PathBuf> = Vec::new();
    let wanted_dirs = h.dirs.iter().map(PathBuf::from).chain(
        h.files
            .keys()
            .map(|f| Path::new(f).parent().unwrap().to_path_buf()),
    );
    for d in wanted_dirs {
        if !d.exists() {
            let a = existing_ancestor(&d);
            if !tmpfs.iter().any(|t| a.starts_with(t)) {
                tmpfs.retain(|t| !t.starts_with(&a));
                tmpfs.push(a);
            }
        }
    }
    for t in &tmpfs {
        sc.push_str(&format!(
            "mount -t tmpfs lab-sys {}\n",
            sh_quote(&t.display().to_string())
        ));
    }
    for d in &h.dirs {
        sc.push_str(&format!("mkdir -p {}\n", sh_quote(d)));
    }
    for (i, (path, content)) in h.files.iter().enumerate() {
        let src = dir.join(format!("file{i}"));
        std::fs::write(&src, format!("{content}\n")).map_err(|e| e.to_string())?;
        let p = Path::new(path);
        let parent = p.parent().unwrap().display().to_string();
        sc.push_str(&format!("mkdir -p {}\n", sh_quote(&parent)));
        if tmpfs.iter().any(|t| p.starts_with(t)) {
            sc.push_str(&format!(
                "cat {} > {}\n",
                sh_quote(&src.display().to_string()),
                sh_quote(path)
            ));
        } else {
            sc.push_str(&format!(
                "[ -e {q} ] || : > {q}\nmount --bind {} {q}\n",
                sh_quote(&src.display().to_string()),
                q = sh_quote(path)
            ));
        }
    }
    sc.push_str("echo ready\nexec sleep 100000\n");
    Ok(sc)
}

/// Where a host's own files live (boot id, `/sys` contents, its loader path `lib/`).
pub fn host_dir(dir: &Path, host: &str) -> PathBuf {
    dir.join(format!("host-{host}"))
}

/// The namespaces of one scenario: a switch (bridge) and its hosts.
pub struct Fabric {
    // Hosts first: dropped before the switch.
    hosts: Vec<(String, Holder)>,
    _switch: Holder,
}

impl Fabric {
    /// Builds the hosts; each one's `DIR/host-NAME/lib` (filled by the caller) appears at `libs`.
    pub fn build(hosts: &[Host], dir: &Path, libs: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let switch = Holder::start(
            &["--net"],
            "ip link set lo up\nip link add lab-br type bridge\nip link set lab-br up\necho ready\nexec sleep 100000\n",
            &dir.join("switch.log"),
        )?;
        let mut out = Vec::new();
        for (j, h) in hosts.iter().enumerate() {
            let hdir = host_dir(dir, &h.name);
            std::fs::create_dir_all(&hdir).map_err(|e| e.to_string())?;
            let boot_id = h
                .boot_id
                .clone()
                .unwrap_or_else(|| format!("1ab00000-0000-4000-8000-{:012x}", j + 1));
            let script = host_script(h, &hdir, &boot_id, libs)?;
            let holder = Holder::start(
                &["--uts", "--mount", "--net", "--propagation", "private"],
                &script,
                &hdir.join("setup.log"),
            )?;
            let pid = holder.pid();
            in_net(pid, &["ip", "link", "set", "lo", "up"])?;
            for (k, i) in h.interfaces.iter().enumerate() {
                if i.kind == "dummy" {
                    in_net(pid, &["ip", "link", "add", &i.name, "type", "dummy"])?;
                } else {
                    let port = format!("h{j}i{k}");
                    let hp = pid.to_string();
                    in_net(
                        switch.pid(),
                        &[
                            "ip", "link", "add", &port, "type", "veth", "peer", "name", &i.name,
                            "netns", &hp,
                        ],
                    )?;
                    in_net(
                        switch.pid(),
                        &["ip", "link", "set", &port, "master", "lab-br"],
                    )?;
                    in_net(switch.pid(), &["ip", "link", "set", &port, "up"])?;
                }
                // An interface scripted with its own link-local address gets no kernel-made one.
                if i.addresses
                    .iter()
                    .any(|a| a.to_ascii_lowercase().starts_with("fe80:"))
                {
                    in_net(pid, &["ip", "link", "set", &i.name, "addrgenmode", "none"])?;
                }
                for a in i.address.iter().chain(&i.addresses) {
                    if a.contains(':') {
                        // IPv6: usable at once (no duplicate address detection on the bridge).
                        in_net(
                            pid,
                            &["ip", "-6", "addr", "add", a, "dev", &i.name, "nodad"],
                        )?;
                    } else {
                        in_net(pid, &["ip", "addr", "add", a, "dev", &i.name])?;
                    }
                }
                if let Some(m) = i.mtu {
                    in_net(pid, &["ip", "link", "set", &i.name, "mtu", &m.to_string()])?;
                }
                in_net(pid, &["ip", "link", "set", &i.name, "up"])?;
            }
            out.push((h.name.clone(), holder));
        }
        Ok(Fabric {
            hosts: out,
            _switch: switch,
        })
    }

    /// The pid whose namespaces a rank of `host` enters.
    pub fn pid_of(&self, host: &str) -> u32 {
        self.hosts
            .iter()
            .find(|(n, _)| n == host)
            .map(|(_, h)| h.pid())
            .expect("host exists")
    }
}

/// Why namespace scenarios cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root (creating UTS/mount/network namespaces needs CAP_SYS_ADMIN; CI runs as root)".into());
    }
    for tool in ["unshare", "nsenter", "ip"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!(
                "`{tool}` is not installed (util-linux / iproute2; scripts/setup.sh installs them)"
            ));
        }
    }
    let probe = Command::new("unshare")
        .args(["--uts", "--mount", "--net", "true"])
        .output();
    match probe {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "namespaces cannot be created here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("unshare: {e}")),
    }
}
