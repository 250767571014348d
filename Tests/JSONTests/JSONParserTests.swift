import JSON
import Testing

@Suite struct JSONParserTests {
    @Test func parsesEveryKindOfValue() throws {
        let value = try JSONParser.parse(#"{"a": [1, -2.5e2, true, false, null], "b": {"c": "d"}, "e": ""}"#)
        #expect(value["a"] == .array([.number(1), .number(-250), .bool(true), .bool(false), .null]))
        #expect(value["b"]?["c"] == .string("d"))
        #expect(value["e"] == .string(""))
    }

    @Test func decodesEscapesAndSurrogatePairs() throws {
        let value = try JSONParser.parse(#""a\"b\\c\/d\n\u00fc\ud83d\ude9a\u0000""#)
        #expect(value == .string("a\"b\\c/d\nü🚚\u{0}"))
    }

    @Test func keepsHugeNumbersAsInfinityForRangeChecks() throws {
        #expect(try JSONParser.parse("1e999") == .number(.infinity))
        #expect(try JSONParser.parse("-1e999") == .number(-.infinity))
    }

    /// Plain decimals skip strtod; each must read as the correctly rounded value strtod gives
    /// (Swift's `Double(String)` is strtod), down to the sign of zero, and so must the numbers
    /// handed to strtod.
    @Test func plainDecimalsReadExactlyAsStrtodReadsThem() throws {
        var generator = SystemRandomNumberGenerator()
        var texts = ["0", "-0", "0.0", "-0.000", "1", "180", "-90", "37.7749295", "-122.4194155", "0.1", "0.3",
                     "999999999999999", "99999999999999.9", "0.000000000000001", "123456789012345", "1234567890123456",
                     "9007199254740993", "1.7976931348623157", "4.9406564584124654",
                     // Forms read by strtod: exponents, and more digits than an exact double holds.
                     "1.5e3", "-2E-2", "0e0", "1E+2", "12345678901234567890", "0.12345678901234567"]
        for _ in 0..<20_000 {
            let integerDigits = Int.random(in: 1...9, using: &generator)
            let fractionDigits = Int.random(in: 0...12, using: &generator)
            var text = Bool.random(using: &generator) ? "-" : ""
            text += String(Int.random(in: 1...9, using: &generator))
            for _ in 1..<integerDigits { text += String(Int.random(in: 0...9, using: &generator)) }
            if fractionDigits > 0 {
                text += "."
                for _ in 0..<fractionDigits { text += String(Int.random(in: 0...9, using: &generator)) }
            }
            texts.append(text)
        }
        for text in texts {
            let parsed = try JSONParser.parse(text)
            let expected = try #require(Double(text))
            guard case .number(let value) = parsed, value.bitPattern == expected.bitPattern else {
                Issue.record("\(text) read as \(parsed), strtod reads \(expected)")
                return
            }
        }
    }

    @Test(arguments: [
        "", "{", "{\"a\" 1}", "[1,]", "01", "1.", "-", "tru", "\"unterminated", "{\"a\":1}x",
        "\"\u{01}\"", "'single'", "{a: 1}", "\"\\x\"", "\"\\ud800\"", "NaN",
    ])
    func rejectsMalformedText(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONParser.parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xFF, 0xFE, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xC0, 0xAF, 0x22]) }  // overlong '/'
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xED, 0xA0, 0x80, 0x22]) }  // surrogate
    }

    @Test func boundsNesting() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONParser.parse(deep) }
    }

    @Test func writerOutputParsesBackToTheSameValues() throws {
        var inner = JSONObjectWriter()
        inner.add("n", 37.422)
        var writer = JSONObjectWriter()
        writer.add("s", "quote \" backslash \\ newline \n control \u{1} ü")
        writer.add("i", 90)
        writer.add("whole", 4.0)
        writer.add("o", inner)
        writer.add("list", [inner, inner])
        let parsed = try JSONParser.parse(writer.json)
        #expect(parsed["s"] == .string("quote \" backslash \\ newline \n control \u{1} ü"))
        #expect(parsed["i"] == .number(90))
        #expect(parsed["whole"] == .number(4))
        #expect(parsed["o"]?["n"] == .number(37.422))
        #expect(parsed["list"]?.arrayValue?.count == 2)
        // The exact text, escapes and number forms included, not the writer compared with itself.
        #expect(writer.json == #"{"s":"quote \" backslash \\ newline \n control \u0001 ü","i":90,"whole":4,"#
            + #""o":{"n":37.422},"list":[{"n":37.422},{"n":37.422}]}"#)
        #expect(parsed.serialized() == #"{"i":90,"list":[{"n":37.422},{"n":37.422}],"o":{"n":37.422},"#
            + #""s":"quote \" backslash \\ newline \n control \u0001 ü","whole":4}"#)
    }

    /// A field as the tests compare it: a string's text made, other kinds by name.
    private enum Seen: Equatable {
        case null, number(Double), string(String), other(String)
    }

    /// `parseTopLevel` into slots that start nil: the fields' values, and any top level other
    /// than an object.
    @discardableResult
    private func topLevel(_ text: String, _ fields: JSONFieldNames) throws -> (values: [Seen?], other: JSONValue?) {
        let bytes = Array(text.utf8)
        return try bytes.withUnsafeBufferPointer { bytes in
            var values = [JSONField?](repeating: nil, count: fields.count)
            let other = try values.withUnsafeMutableBufferPointer { try JSONParser.parseTopLevel(bytes, fields: fields, into: $0) }
            let seen = values.map { field -> Seen? in
                switch field {
                case nil: nil
                case .other(.null)?: .null
                case .number(let number)?: .number(number)
                case .string(let place)?: .string(JSONParser.text(of: place, in: bytes))
                case let other?: .other(other.typeName)
                }
            }
            return (seen, other)
        }
    }

    /// A record's top level is read for the fields asked for alone, keys matched as bytes: an
    /// escaped key is the name it spells, an escaped string the text it spells, the last of a
    /// repeated name counts, and any other member is still parsed strictly before it is dropped.
    @Test func aTopLevelIsReadForTheFieldsAskedFor() throws {
        let fields = JSONFieldNames(["id", "lat", "ü", "kind", "plain"])
        let text = #"{"lat": 1, "other": {"x": [1, "y"]}, "i\u0064": "a\u0062", "lat": 2.5, "\u00fc": null, "\u00fcx": 3, "kind": [true], "plain": "ü"}"#
        let read = try topLevel(text, fields)
        #expect(read.other == nil)
        #expect(read.values == [.string("ab"), .number(2.5), .null, .other("array"), .string("ü")])
        let none = try topLevel("{}", fields)
        #expect(none.other == nil)
        #expect(none.values == [nil, nil, nil, nil, nil])
        let array = try topLevel("[1]", fields)
        #expect(array.other == .array([.number(1)]), "an array is not read as an object")
        #expect(array.values == [nil, nil, nil, nil, nil])
        for malformed in [#"{"other": [1,]}"#, #"{"lat": 1} x"#, "{\"l\u{1}\": 1}", #"{"id": "a"#, #"{"id": "a\x"}"#, #"{"kind": tru}"#] {
            #expect(throws: JSONParseError.self, "\(malformed)") {
                try topLevel(malformed, fields)
            }
        }
    }

    /// Keys in every order, names that are prefixes of others, and the empty name are each read
    /// into their own field; a key that only starts like a field's name is none of them.
    @Test func everyOrderOfTheKeysIsReadAlike() throws {
        let names = ["lat", "la", "l", "", "latitude"]
        let fields = JSONFieldNames(names)
        func permutations(_ items: [Int]) -> [[Int]] {
            items.isEmpty ? [[]] : items.indices.flatMap { index in
                permutations(items.enumerated().filter { $0.offset != index }.map(\.element)).map { [items[index]] + $0 }
            }
        }
        for order in permutations(Array(names.indices)) {
            let members = order.map { "\"\(names[$0])\": \($0)" } + ["\"lati\": 9"]
            let text = "{" + members.joined(separator: ", ") + "}"
            let read = try topLevel(text, fields)
            #expect(read.other == nil, "\(text) read as another value")
            #expect(read.values == names.indices.map { .number(Double($0)) }, "\(text)")
        }
    }

    @Test func objectsWrittenInPlaceNestAndSeparateCorrectly() throws {
        var writer = JSONObjectWriter(reservingCapacity: 64)
        writer.add("first", 1)
        writer.addObject("empty") { _ in }
        writer.addObject("point") { point in
            point.add("lat", 1.5)
            point.addObject("meta") { $0.add("tag", "a\"b") }
        }
        writer.addObjects("items", [3, 4, 5]) { item, value in item.add("v", value) }
        writer.addObjects("none", [Int]()) { _, _ in }
        writer.add("last", true)
        #expect(writer.json == #"{"first":1,"empty":{},"point":{"lat":1.5,"meta":{"tag":"a\"b"}},"#
            + #""items":[{"v":3},{"v":4},{"v":5}],"none":[],"last":true}"#)
        #expect(try JSONParser.parse(writer.json)["items"]?.arrayValue?.count == 3)
    }
}
