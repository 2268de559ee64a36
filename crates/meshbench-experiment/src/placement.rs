//! A cell's placement: the client and the called workload on one node or on two (E1's
//! placement dimension). What runs where is the [`crate::Application`]'s topology.

/// E1's placement dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    IntraNode,
    InterNode,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::IntraNode => "intra-node",
            Placement::InterNode => "inter-node",
        }
    }

    pub fn parse(name: &str) -> Option<Placement> {
        [Placement::IntraNode, Placement::InterNode]
            .into_iter()
            .find(|p| p.name() == name)
    }
}
