"""Who is asking: the security key, the admin token and JWTs as DRF authentication and permissions (`auth`), a JWT
verified into a `Caller` (`tokens`, with the JWKS file's keys, `jwks`), and what a caller's scopes let it do
(`scopes`)."""
