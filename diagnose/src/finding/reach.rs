//! What a finding may explain besides the calls it names: the classes of the story's
//! failure-graph nodes (declared per finding, `registry`), and how far a violated invariant
//! reaches. Defined here, below the story and the invariants that use them, so that a finding
//! can say what it covers without naming either.

/// Node kinds as findings declare what they explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeClass {
    Call,
    Signal,
    Vanished,
    LeftEarly,
    Behind,
    /// Different arguments (count, datatype, reduction, root, p2p size) for one operation.
    Mismatch,
    /// A different collective at the same point.
    Desync,
    StuckInside,
}

/// How far a violation reaches: which failures it may explain. Nearer scopes win when several
/// invariants are broken around one failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The violating processes themselves.
    Process,
    /// Every member of the communicator it concerns.
    Communicator,
    /// Every process on the host it concerns.
    Host,
    /// Every process of the job.
    Job,
}
