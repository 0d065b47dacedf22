"""What a team plans on: model specs (specs) and saved clusters (clusters); their pages, endpoints, forms,
serializers and reads (selectors)."""
