"""The HTTP endpoint as an OAuth resource server.

`bearer` (the middleware that checks access tokens, `BearerAuth`, and the verifier
protocol), `verifiers` (JWT against a key set, token introspection), `identity`
(presets for well-known identity providers), `oauth_proxy` (client registration and
login in front of a provider) and `_dpop` (DPoP proofs, RFC 9449). Server side only.
"""
