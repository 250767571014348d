import FleetAuth
import Foundation
import Testing

@Suite struct Base64URLTests {
    /// Foundation's base64 with the URL alphabet and no padding: the reference.
    func reference(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test func agreesWithFoundationAndRoundTripsEveryLength() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<200 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let encoded = Base64URL.encode(bytes)
            #expect(encoded == reference(bytes), "length \(length)")
            #expect(Base64URL.decode(encoded) == bytes, "length \(length)")
        }
        #expect(Base64URL.encode("{\"alg\":\"RS256\"}") == "eyJhbGciOiJSUzI1NiJ9")
    }

    @Test func refusesWhatIsNotBase64URL() {
        #expect(Base64URL.decode("ab+c") == nil)
        #expect(Base64URL.decode("ab/c") == nil)
        #expect(Base64URL.decode("abc=") == nil)
        #expect(Base64URL.decode("abcde") == nil, "a length of 4n+1 cannot come from any input")
        #expect(Base64URL.decode("é") == nil)
    }
}
