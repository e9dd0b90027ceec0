//! Turns one rank of a scenario into the script file its processes read (`$LAB_SCRIPT`, the
//! line format of `tests/doubles/lab/lab_script.h`): identity lines for the scripted libnccl
//! and the CUDA doubles, then one line per step with the rank's defaults filled in.

use crate::scenario::{datatype_number, signal_number, RankGroup, Step};

/// Where a rank stands in its run.
pub struct RankPlace {
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
}

impl RankPlace {
    /// `{rank}`, `{local_rank}`, `{world_size}` in a scenario's text, for this rank.
    pub fn fill(&self, text: &str) -> String {
        text.replace("{rank}", &self.rank.to_string())
            .replace("{local_rank}", &self.local_rank.to_string())
            .replace("{world_size}", &self.world_size.to_string())
    }
}

fn field(out: &mut String, k: &str, v: impl std::fmt::Display) {
    let v = v.to_string();
    assert!(
        !v.contains(['\t', '\n']),
        "script values cannot hold tabs or newlines: {v:?}"
    );
    out.push('\t');
    out.push_str(k);
    out.push('=');
    out.push_str(&v);
}

pub fn render(g: &RankGroup, place: &RankPlace) -> String {
    let mut out = String::new();
    if let Some(v) = g.nccl_version {
        out.push_str("op=nccl");
        field(&mut out, "version", v);
        out.push('\n');
    }
    if let Some(c) = &g.cuda {
        out.push_str("op=cuda");
        if let Some(v) = c.driver {
            field(&mut out, "version", v);
        }
        if let Some(d) = &c.device {
            field(&mut out, "device", d);
        }
        if let Some(b) = c.pci_bus {
            field(&mut out, "pci_bus", b);
        }
        if let Some(n) = &c.name {
            field(&mut out, "name", n);
        }
        if let Some(u) = &c.uuid {
            field(&mut out, "uuid", u);
        }
        out.push('\n');
        if let Some(v) = c.runtime {
            out.push_str("op=cudart");
            field(&mut out, "version", v);
            out.push('\n');
        }
    }
    for s in &g.script {
        // Driver calls NCCL makes inside the step: lines of their own just before it.
        for d in &s.drivers {
            out.push_str("op=driver");
            field(&mut out, "cu", &d.call);
            field(&mut out, "cu_rc", d.rc);
            field(&mut out, "repeat", d.repeat.max(1));
            if let Some((t, id)) = d.location().expect("validated") {
                field(&mut out, "loc", t);
                field(&mut out, "locid", id);
            }
            out.push('\n');
        }
        out.push_str(&step_line(s, place));
        out.push('\n');
    }
    place.fill(&out)
}

fn step_line(s: &Step, place: &RankPlace) -> String {
    let mut l = String::new();
    if let Some(ms) = s.sleep_ms {
        l.push_str("op=sleep");
        field(&mut l, "ms", ms);
        return l;
    }
    if s.hang_outside == Some(true) {
        return "op=hang".into();
    }
    if let Some(sig) = &s.signal {
        l.push_str("op=signal");
        field(&mut l, "sig", signal_number(sig).expect("validated"));
        return l;
    }
    if let Some(code) = s.exit {
        l.push_str("op=exit");
        field(&mut l, "code", code);
        return l;
    }
    if let Some(f) = &s.app_driver {
        l.push_str("op=app_driver");
        field(&mut l, "cu", f);
        field(&mut l, "cu_rc", s.driver_rc.unwrap_or(0));
        return l;
    }
    if let Some(lib) = &s.load {
        l.push_str("op=load");
        field(&mut l, "name", lib);
        return l;
    }
    let call = s.call.as_deref().unwrap_or("noop");
    l.push_str("op=");
    l.push_str(call);
    field(&mut l, "repeat", s.repeat.unwrap_or(1));
    if let Some(rc) = s.rc {
        field(&mut l, "rc", rc);
    }
    if let Some(t) = &s.error {
        field(&mut l, "text", t);
    }
    if s.kernel_hang == Some(true) {
        field(&mut l, "khang", 1);
    }
    if s.hang == Some(true) {
        field(&mut l, "hang", 1);
    }
    if let Some(us) = s.kernel_us {
        field(&mut l, "kus", us);
    }
    if let Some(ms) = s.every_ms {
        field(&mut l, "ms", ms);
    }
    if let Some(ms) = s.takes_ms {
        field(&mut l, "tms", ms);
    }
    if let Some(d) = &s.datatype {
        field(&mut l, "dtype", datatype_number(d).expect("validated"));
    }
    if let Some(a) = s.async_error {
        field(&mut l, "async", a);
    }
    if let Some(c) = s.count {
        field(&mut l, "count", c);
    }
    if let Some(p) = s.peer {
        field(&mut l, "peer", p);
    }
    if call.starts_with("ncclCommInitRank") || call == "ncclGetUniqueId" {
        field(&mut l, "nranks", s.nranks.unwrap_or(place.world_size));
        field(&mut l, "rank", s.rank.unwrap_or(place.rank));
        field(&mut l, "uid", s.uid.unwrap_or(1));
        if let Some(r) = &s.root {
            field(&mut l, "root", r);
        }
    }
    if call == "ncclCommSplit" {
        field(&mut l, "color", s.color.unwrap_or(0));
        if let Some(n) = s.nranks {
            field(&mut l, "nranks", n);
        }
    }
    if let Some(d) = &s.driver {
        field(&mut l, "cu", d);
        field(&mut l, "cu_rc", s.driver_rc.unwrap_or(0));
    }
    l
}
