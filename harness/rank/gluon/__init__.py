"""The MXNet runtime: Gluon models, Gluon data loaders and the rank-side set-up of MXNet."""
