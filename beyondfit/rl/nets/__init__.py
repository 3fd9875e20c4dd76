"""The networks: encoders (what turns an observation into features), the policy-gradient
policies and the off-policy agents built on them."""
