// Standard base64 (RFC 4648 section 4: A-Z a-z 0-9 + /, '=' padding), the encoding of tiktoken.model's tokens and
// of data: URIs (images sent to the server inline).
#pragma once

#include <string>
#include <string_view>

namespace myriad {

// Decodes `in` into `out`; false when it is not base64 (a length that is not a multiple of 4, a character outside
// the alphabet, padding anywhere but the last one or two places). Linear in the input.
bool base64_decode(std::string_view in, std::string& out);

// The base64 text of `in`, '=' padded.
std::string base64_encode(std::string_view in);

}  // namespace myriad
