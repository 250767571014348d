@testable import Egress
import NIOHTTP2
import Testing

/// What the server lets the relay send, without a socket: streams beyond its limit wait and
/// open in order as others end, bodies go as far as both windows and the frame size allow and
/// wait for WINDOW_UPDATE, SETTINGS change streams under way, and a GOAWAY refuses the waiting.
struct HTTP2SendFlowTests {
    private func limit(_ limit: UInt32?, window: UInt32? = nil, frameSize: UInt32? = nil,
                       _ flow: inout HTTP2SendFlow) throws -> [HTTP2StreamID] {
        try flow.receivedSettings(streamLimit: limit, initialWindow: window, maximumFrameSize: frameSize)
    }

    private func starts(_ streams: [HTTP2StreamID], _ flow: inout HTTP2SendFlow) -> [Bool] {
        streams.map { flow.start($0) }
    }

    @Test func streamsBeyondTheLimitWaitAndOpenInOrderAsOthersEnd() throws {
        var flow = HTTP2SendFlow()
        let opened = try limit(2, &flow)
        #expect(opened.isEmpty)
        let started = starts([1, 3, 5, 7, 9], &flow)
        #expect(started == [true, true, false, false, false])
        #expect(flow.highestOpened == 3, "the server hears of no stream that waits")
        let afterWaitingEnded = flow.ended(7)
        #expect(afterWaitingEnded.isEmpty, "a waiting stream that ended leaves the queue without opening another")
        let afterFirst = flow.ended(1)
        #expect(afterFirst == [5])
        let afterSecond = flow.ended(3)
        #expect(afterSecond == [9])
        #expect(flow.openStreams == 2)
        let raised = try limit(4, &flow)
        #expect(raised.isEmpty)
        let next = starts([11], &flow)
        #expect(next == [true], "a raised limit lets the next stream open at once")
    }

    @Test func aRaisedLimitOpensTheWaitingAndAGoAwayRefusesThem() throws {
        var flow = HTTP2SendFlow()
        _ = try limit(1, &flow)
        let started = starts([1, 3, 5, 7], &flow)
        #expect(started == [true, false, false, false])
        let opened = try limit(3, &flow)
        #expect(opened == [3, 5])
        let refused = flow.receivedGoAway()
        #expect(refused == [7])
        let afterEnd = flow.ended(1)
        #expect(afterEnd.isEmpty, "nothing opens after a GOAWAY")
    }

    @Test func aBodyGoesAsFarAsBothWindowsAndTheFrameSizeAllow() throws {
        var flow = HTTP2SendFlow()
        let started = starts([1, 3], &flow)
        #expect(started == [true, true])
        // The connection's 65,535 bytes are shared; each stream has 65,535 of its own.
        var sent: [Int] = []
        for remaining in [100_000, 83_616, 67_232, 50_848, 34_465] { sent.append(flow.sendable(remaining, on: 1)) }
        #expect(sent == [16_384, 16_384, 16_384, 16_383, 0], "one frame at most, then the rest of the windows")
        let blockedByConnection = flow.sendable(10, on: 3)
        #expect(blockedByConnection == 0, "the connection's window is spent too")
        let waiting = flow.windowsGrew()
        #expect(waiting == [1, 3])
        let connectionUpdate = try flow.receivedWindowUpdate(1_000, on: .rootStream)
        #expect(connectionUpdate == .grew)
        let blockedByStream = flow.sendable(34_465, on: 1)
        #expect(blockedByStream == 0, "stream 1's own window is still spent")
        let small = flow.sendable(10, on: 3)
        #expect(small == 10)
        let streamUpdate = try flow.receivedWindowUpdate(500, on: 1)
        #expect(streamUpdate == .grew)
        let waitingAgain = flow.windowsGrew()
        #expect(waitingAgain == [1])
        let resumed = flow.sendable(34_465, on: 1)
        #expect(resumed == 500)
        let empty = flow.sendable(0, on: 3)
        #expect(empty == 0, "an empty body's last frame needs no window")
        let none = flow.windowsGrew()
        #expect(none.isEmpty, "nothing is held back")
    }

    @Test func settingsChangeTheWindowsOfStreamsUnderWayAndTheFrameSize() throws {
        var flow = HTTP2SendFlow()
        let started = starts([1], &flow)
        #expect(started == [true])
        let first = flow.sendable(1_000, on: 1)
        #expect(first == 1_000)
        _ = try limit(nil, window: 500, &flow)
        let belowZero = flow.sendable(10, on: 1)
        #expect(belowZero == 0, "65,535 lowered to 500 leaves the stream 500 − 1,000 below zero")
        _ = try limit(nil, window: 2_000, frameSize: 20_000, &flow)
        let raised = flow.sendable(5_000, on: 1)
        #expect(raised == 1_000)
        let startedLater = starts([3], &flow)
        #expect(startedLater == [true])
        let newStream = flow.sendable(5_000, on: 3)
        #expect(newStream == 2_000, "a new stream starts with the new window")
        #expect(flow.maximumFrameSize == 20_000)
    }

    @Test func invalidSettingsAndUpdatesAreNamed() throws {
        var flow = HTTP2SendFlow()
        #expect(throws: HTTP2ConnectionError.self) { _ = try limit(nil, window: 1 << 31, &flow) }
        #expect(throws: HTTP2ConnectionError.self) { _ = try limit(nil, frameSize: 100, &flow) }
        #expect(throws: HTTP2ConnectionError.protocolError("a connection window update of 0")) {
            _ = try flow.receivedWindowUpdate(0, on: .rootStream)
        }
        #expect(throws: HTTP2ConnectionError.self) { _ = try flow.receivedWindowUpdate(Int(Int32.max), on: .rootStream) }
        let started = starts([1], &flow)
        #expect(started == [true])
        let zero = try flow.receivedWindowUpdate(0, on: 1)
        #expect(zero == .resetStream("a window update of 0 on its stream"))
        let ended = try flow.receivedWindowUpdate(10, on: 9)
        #expect(ended == .ignored, "a stream that ended meanwhile")
    }
}
