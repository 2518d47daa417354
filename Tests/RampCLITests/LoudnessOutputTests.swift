import RampAudio
import RampProtocol
import Testing

@testable import RampCLI

/// What `rampctl loudness` prints: the progress line, the table's -inf and reasons, the JSON's nulls.
@Suite struct LoudnessOutputTests {
  @Test func progressCountsFinishedFilesAndTheFramesOfOpenOnes() {
    let progress = LoudnessSurvey.Progress(files: 3)
    #expect(progress.text == "loudness: 0/3 files")
    progress.opened(0, frames: 1000)
    progress.read(0, frames: 250)
    #expect(progress.text == "loudness: 0/3 files, 25% of the file read")
    progress.opened(1, frames: 3000)
    progress.read(1, frames: 3000)
    #expect(progress.text == "loudness: 0/3 files, 81% of 2 files read")
    progress.finished(1)
    progress.finished(2)
    #expect(progress.text == "loudness: 2/3 files, 25% of the file read")
    // A length libsndfile does not know (a huge value) gives no share.
    progress.opened(0, frames: .max)
    #expect(progress.text == "loudness: 2/3 files")
  }

  @Test func unmeasuredFilesPrintMinusInfinityWithTheirReason() throws {
    let loud = Loudness(
      integrated: -23.04, range: 5.25, truePeak: -1.0, frames: 96_000, sampleRate: 48_000, channels: 2)
    let silent = Loudness(
      integrated: -.infinity, range: 0, truePeak: -.infinity, frames: 48_000, sampleRate: 48_000, channels: 2)
    let short = Loudness(
      integrated: -.infinity, range: 0, truePeak: -6, frames: 9_600, sampleRate: 48_000, channels: 1)
    #expect(loud.unmeasured == nil && silent.unmeasured == .silent && short.unmeasured == .tooShort)
    let entries = [
      LoudnessSurvey.Entry(path: "a.wav", outcome: .success(loud)),
      LoudnessSurvey.Entry(path: "gone.wav", outcome: .failure(AudioError(.unreadableFile, "cannot read 'gone.wav'"))),
      LoudnessSurvey.Entry(path: "s.wav", outcome: .success(silent), cached: true),
      LoudnessSurvey.Entry(path: "t.wav", outcome: .success(short)),
    ]
    #expect(
      LoudnessSurvey.table(entries) == """
        INTEGRATED   RANGE  TRUE PEAK  DURATION  FILE
        -23.0 LUFS  5.3 LU  -1.0 dBTP  2s        a.wav
         -inf LUFS  0.0 LU  -inf dBTP  1s        s.wav (silent: below the -70 LUFS gate)
         -inf LUFS  0.0 LU  -6.0 dBTP  200ms     t.wav (too short: under the 0.4 s a measurement needs)

        """)
    let json = entries.map { LoudnessSurvey.json($0).serialized() }
    #expect(
      json == [
        #"{"path":"a.wav","integrated":-23.04,"range":5.25,"truePeak":-1,"duration":2,"sampleRate":48000,"channels":2,"cached":false}"#,
        #"{"path":"gone.wav","error":{"code":"unreadable-file","message":"cannot read 'gone.wav'"}}"#,
        #"{"path":"s.wav","integrated":null,"range":0,"truePeak":null,"duration":1,"sampleRate":48000,"channels":2,"unmeasured":"silent","cached":true}"#,
        #"{"path":"t.wav","integrated":null,"range":0,"truePeak":-6,"duration":0.2,"sampleRate":48000,"channels":1,"unmeasured":"too-short","cached":false}"#,
      ])
  }
}
