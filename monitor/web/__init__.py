"""The overview page at `/` and `infermon status`: one overview model, two faces."""
