import JSON
import Testing

@Suite struct JSONReaderTests {
    /// Rebuilds a value by walking it with the reader alone: objects member by member (every
    /// key asked for by name), arrays element by element, scalars taken as they come.
    static func walk(_ reader: inout JSONReader, keys: [String]) throws -> JSONValue {
        let names = JSONFieldNames(keys)
        switch reader.kind {
        case .object:
            #expect(try reader.beginObject())
            var members: [String: JSONValue] = [:]
            while let member = try reader.nextMember(in: names) {
                guard case .field(let index) = member else {
                    Issue.record("a key the walk asked for was not matched")
                    try reader.skipValue()
                    continue
                }
                members[keys[index]] = try walk(&reader, keys: keys)
            }
            return .object(members)
        case .array:
            #expect(try reader.beginArray())
            var elements: [JSONValue] = []
            while try reader.nextElement() { elements.append(try walk(&reader, keys: keys)) }
            return .array(elements)
        case .number: return .number(try #require(try reader.readNumber()))
        case .string: return .string(try #require(try reader.readString()))
        case .bool, .null, nil: return try reader.readValue()
        }
    }

    static func keys(of value: JSONValue) -> Set<String> {
        switch value {
        case .object(let members): members.keys.reduce(into: Set(members.keys)) { $0.formUnion(keys(of: members[$1]!)) }
        case .array(let elements): elements.reduce(into: []) { $0.formUnion(keys(of: $1)) }
        default: []
        }
    }

    static func randomValue(depth: Int, using random: inout some RandomNumberGenerator) -> JSONValue {
        let names = ["a", "b", "lat", "lng", "ü", "quote\"d", "x y", ""]
        switch Int.random(in: depth > 3 ? 0...4 : 0...6, using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .number(Double(Int.random(in: -1_000_000...1_000_000, using: &random)) / 1000)
        case 3: return .number(Double.random(in: -1e300...1e300, using: &random))
        case 4: return .string(String(names.randomElement(using: &random)!) + "\u{1}\n\\")
        case 5: return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in randomValue(depth: depth + 1, using: &random) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...4, using: &random) {
                members[names.randomElement(using: &random)!] = randomValue(depth: depth + 1, using: &random)
            }
            return .object(members)
        }
    }

    /// What the reader hands out is what the parser reads, over random documents written with
    /// spaces and escapes, and every malformed text the parser refuses, the reader refuses too.
    @Test func aWalkReadsWhatTheParserReads() throws {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let value = Self.randomValue(depth: 0, using: &random)
            // Whitespace around every separator (no generated string holds one).
            let text = value.serialized().map { $0 == "," ? " ,\n " : $0 == ":" ? " : " : String($0) }.joined()
            let bytes = Array(text.utf8)
            let keys = Array(Self.keys(of: value))
            let walked = try JSONReader.read(bytes) { try Self.walk(&$0, keys: keys) }
            #expect(walked == (try JSONParser.parse(bytes)), "\(text)")
        }
        for malformed in ["", "{", "{\"a\" 1}", "[1,]", "[1 2]", "{\"a\":1,}", "{,\"a\":1}", "[,1]", "01", "{\"a\":1}x",
                          "{\"a\":[1,}", "{\"a\":{\"b\":1]}", "\"\u{01}\"", "{a: 1}", "[1]]", "{\"a\":1}}"] {
            #expect(throws: JSONParseError.self, "\(malformed)") { try JSONParser.parse(malformed) }
            #expect(throws: JSONParseError.self, "\(malformed)") {
                try JSONReader.read(Array(malformed.utf8)) { try Self.walk(&$0, keys: ["a", "b"]) }
            }
        }
    }

    /// Values not taken are checked as they are passed over; a member left unread, or an
    /// object left before its end, is an error rather than a silent skip.
    @Test func whatIsNotTakenIsCheckedAndWhatIsLeftUnreadFails() throws {
        let names = JSONFieldNames(["lat"])
        let lat = try JSONReader.read(Array(#"{"other": {"deep": [1, {"x": null}]}, "lat": 12.5}"#.utf8)) { reader in
            var lat: Double?
            _ = try reader.beginObject()
            while let member = try reader.nextMember(in: names) {
                if member == .field(0) { lat = try reader.readNumber() } else { try reader.skipValue() }
            }
            return lat
        }
        #expect(lat == 12.5)
        #expect(throws: JSONParseError.self, "a malformed member passed over") {
            try JSONReader.read(Array(#"{"other": [1,], "lat": 1}"#.utf8)) { reader in
                _ = try reader.beginObject()
                while let member = try reader.nextMember(in: names) { if member == .other { try reader.skipValue() } else { _ = try reader.readNumber() } }
            }
        }
        #expect(throws: JSONParseError.self, "a member's value left unread") {
            try JSONReader.read(Array(#"{"other": 1, "lat": 1}"#.utf8)) { reader in
                _ = try reader.beginObject()
                while try reader.nextMember(in: names) != nil {}
            }
        }
        #expect(throws: JSONParseError.self, "an object left before its end") {
            try JSONReader.read(Array(#"{"lat": 1, "other": 2}"#.utf8)) { reader in
                _ = try reader.beginObject()
                _ = try reader.nextMember(in: names)
                _ = try reader.readNumber()
            }
        }
        #expect(try JSONReader.read(Array(" [1, 2] ".utf8)) { _ in 7 } == 7, "a value not walked at all is checked whole")
        #expect(throws: JSONParseError.self) { try JSONReader.read(Array("[1, 2,]".utf8)) { _ in 7 } }
        let notANumber = try JSONReader.read(Array(#""text""#.utf8)) { reader in
            (try reader.readNumber(), try reader.beginObject(), try reader.beginArray(), try reader.readString())
        }
        #expect(notANumber.0 == nil && !notANumber.1 && !notANumber.2 && notANumber.3 == "text",
                "a value of another kind is left in place for what asks next")
    }
}
