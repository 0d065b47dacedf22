"""What every domain shares: the refusals services raise (refusals), a bounded cache, the page forms' error
placement, the check of an object a request refers to."""
